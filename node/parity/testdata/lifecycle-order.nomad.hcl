# Lifecycle hooks: a prestart task, the main task, a poststart task and a
# poststop task. The parity suite compares each task's events and the
# order the hooks impose across tasks (lifecycle_test.go).
job "parity-lc-order" {
  datacenters = ["dc1"]
  type        = "batch"

  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "pre" {
      driver = "raw_exec"
      lifecycle {
        hook = "prestart"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo pre"]
      }
    }
    task "main" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "sleep 2; echo main"]
      }
    }
    task "post" {
      driver = "raw_exec"
      lifecycle {
        hook = "poststart"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo post"]
      }
    }
    task "stop" {
      driver = "raw_exec"
      lifecycle {
        hook = "poststop"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo stop"]
      }
    }
  }
}
