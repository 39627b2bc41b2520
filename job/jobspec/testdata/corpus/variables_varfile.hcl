# Needs its variables from variables_varfile.vars.hcl (-var-file).
variable "version" {
  type = string
}

variable "ports" {
  type = list(number)
}

job "versioned" {
  type = "batch"

  group "run" {
    task "run" {
      driver = "raw_exec"

      config {
        command = "/bin/echo"
        args    = ["release", var.version, join(" ", var.ports)]
      }
    }
  }
}
