# Workload identities as Nomad 1.7 writes them: the default one exposed
# to the task, and a named one for an OIDC provider.
job "oidc-client" {
  datacenters = ["dc1"]

  group "api" {
    task "api" {
      driver = "raw_exec"

      config {
        command = "/usr/local/bin/api"
      }

      identity {
        env         = true
        file        = true
        change_mode = "restart"
      }

      identity {
        name          = "example"
        aud           = ["oidc.example.com"]
        file          = true
        ttl           = "1h"
        change_mode   = "signal"
        change_signal = "SIGHUP"
      }
    }
  }
}
