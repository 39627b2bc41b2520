variable "count" {
  type    = number
  default = 0

  validation {
    condition     = var.count > 0
    error_message = "The count must be positive."
  }
}

job "validated" {
  group "g" {
    count = var.count

    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }
    }
  }
}
