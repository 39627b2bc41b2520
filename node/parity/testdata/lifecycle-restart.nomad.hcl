# A batch task that fails, is restarted once by its policy (mode "fail",
# attempts 1), fails again and is not restarted: the parity suite compares
# its task events (lifecycle_test.go).
job "parity-lc-restart" {
  datacenters = ["dc1"]
  type        = "batch"

  group "g" {
    restart {
      attempts = 1
      interval = "1m"
      delay    = "1s"
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "fail" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo failing; exit 3"]
      }
    }
  }
}
