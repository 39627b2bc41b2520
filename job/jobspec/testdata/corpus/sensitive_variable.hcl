variable "password" {
  type      = string
  default   = "changeme"
  sensitive = true
}

job "with-secret" {
  group "g" {
    task "t" {
      driver = "raw_exec"

      env {
        PASSWORD = var.password
      }

      config {
        command = "/usr/bin/app"
      }
    }
  }
}
