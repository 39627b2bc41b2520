# One group per worker queue, generated from a variable.
variable "queues" {
  type = map(number)
  default = {
    emails  = 2
    reports = 1
  }
}

job "workers" {
  datacenters = ["dc1"]
  type        = "service"

  dynamic "group" {
    for_each = var.queues
    iterator = q
    labels   = ["worker-${q.key}"]

    content {
      count = q.value

      task "worker" {
        driver = "raw_exec"

        config {
          command = "/bin/sh"
          args    = ["-c", "exec sleep 3600"]
        }

        dynamic "env" {
          for_each = [q.key]
          content {
            QUEUE = env.value
          }
        }
      }
    }
  }
}
