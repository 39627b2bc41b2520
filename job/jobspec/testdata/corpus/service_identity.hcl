# A service with its own workload identity for Consul (Nomad 1.7+).
job "catalogued" {
  datacenters = ["dc1"]

  group "g" {
    network {
      port "http" {}
    }

    service {
      name     = "catalogued"
      port     = "http"
      provider = "consul"

      identity {
        aud = ["consul.io"]
        ttl = "1h"
      }
    }

    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }
    }
  }
}
