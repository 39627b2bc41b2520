job "whoami" {
  datacenters = ["dc1"]

  group "web" {
    count = 2

    network {
      mode = "bridge"
      port "http" {
        to = 8080
      }
    }

    service {
      name     = "whoami"
      port     = "http"
      provider = "nomad"
      tags     = ["web", "urlprefix-/whoami"]

      check {
        type     = "http"
        path     = "/health"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "server" {
      driver         = "exec"
      user           = "nobody"
      kill_signal    = "SIGINT"
      kill_timeout   = "20s"
      shutdown_delay = "5s"

      config {
        command = "/usr/bin/python3"
        args    = ["-m", "http.server", "${NOMAD_PORT_http}"]
      }

      env {
        LOG_LEVEL = "info"
      }

      resources {
        cpu    = 200
        memory = 128
      }
    }
  }
}
