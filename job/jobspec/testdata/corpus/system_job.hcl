# A node agent: one allocation per node (here: one).
job "node-exporter" {
  type = "system"

  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }

  update {
    max_parallel = 1
    stagger      = "30s"
  }

  group "exporter" {
    network {
      port "metrics" {
        static = 9100
      }
    }

    task "exporter" {
      driver = "exec"

      config {
        command = "/usr/local/bin/node_exporter"
        args    = ["--web.listen-address=:${NOMAD_PORT_metrics}"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
