# Runs on every node (here: one) every night.
job "log-rotate" {
  type = "sysbatch"

  periodic {
    crons            = ["0 3 * * *"]
    prohibit_overlap = true
    time_zone        = "Europe/Berlin"
  }

  group "rotate" {
    count = 2

    restart {
      attempts = 1
      mode     = "fail"
    }

    task "rotate" {
      driver = "raw_exec"

      config {
        command = "/usr/sbin/logrotate"
        args    = ["/etc/logrotate.conf"]
      }
    }
  }
}
