# A web service whose ports and config files come from locals, written
# with dynamic blocks as in Nomad's documentation.
locals {
  ports = {
    http    = 8080
    metrics = 9102
  }
  configs = {
    "app.ini"     = "listen = 8080\n"
    "logging.ini" = "level = info\n"
  }
}

job "web-dynamic" {
  datacenters = ["dc1"]

  dynamic "constraint" {
    for_each = ["linux"]
    content {
      attribute = "${attr.kernel.name}"
      value     = constraint.value
    }
  }

  group "web" {
    network {
      dynamic "port" {
        for_each = local.ports
        labels   = [port.key]
        content {
          static = port.value
        }
      }
    }

    task "server" {
      driver = "raw_exec"

      config {
        command = "/usr/bin/python3"
        args    = ["-m", "http.server", "${NOMAD_PORT_http}"]
      }

      dynamic "template" {
        for_each = local.configs
        iterator = cfg
        content {
          data        = cfg.value
          destination = "local/${cfg.key}"
          change_mode = "restart"
        }
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
