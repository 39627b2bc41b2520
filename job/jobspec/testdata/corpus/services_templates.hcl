job "templated" {
  group "web" {
    network {
      port "http" {
        to = 8080
      }
    }

    service {
      name         = "templated"
      port         = "http"
      provider     = "nomad"
      tags         = ["v1"]
      address_mode = "host"

      meta {
        version = "1"
      }

      check {
        name     = "alive"
        type     = "tcp"
        interval = "10s"
        timeout  = "2s"

        check_restart {
          limit = 3
          grace = "30s"
        }
      }

      check {
        type     = "http"
        path     = "/ready"
        method   = "GET"
        interval = "15s"
        timeout  = "3s"

        header {
          Authorization = ["Bearer x"]
        }
      }
    }

    task "web" {
      driver = "podman"

      template {
        source        = "local/app.conf.tpl"
        destination   = "local/app.conf"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        splay         = "10s"
        perms         = "0640"
      }

      template {
        data        = "PORT={{ env \"NOMAD_PORT_http\" }}\n"
        destination = "local/env"
        env         = true
        change_mode = "restart"

        wait {
          min = "2s"
          max = "10s"
        }
      }

      template {
        data        = "x"
        destination = "local/reload"
        change_mode = "script"

        change_script {
          command       = "/bin/reload"
          args          = ["-v"]
          timeout       = "10s"
          fail_on_error = true
        }
      }

      service {
        name     = "web-task"
        port     = "http"
        provider = "nomad"
      }

      config {
        image = "localhost/busybox:latest"
        ports = ["http"]
      }
    }
  }
}
