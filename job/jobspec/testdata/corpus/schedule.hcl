# Time based task execution (Nomad Enterprise 1.9+).
job "office-hours" {
  datacenters = ["dc1"]

  group "g" {
    task "kiosk" {
      driver = "raw_exec"

      config {
        command = "/usr/bin/kiosk"
      }

      schedule {
        cron {
          start    = "30 9 * * MON-FRI *"
          end      = "0 17"
          timezone = "Europe/Paris"
        }
      }
    }
  }
}
