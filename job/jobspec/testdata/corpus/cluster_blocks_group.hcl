job "clustered-groups" {
  group "api" {
    count                 = 2
    max_client_disconnect = "1h"

    update {
      canary       = 1
      max_parallel = 1
    }

    migrate {
      max_parallel = 1
    }

    scaling {
      enabled = true
      min     = 1
      max     = 10

      policy {
        cooldown = "1m"

        check "cpu" {
          source = "nomad-apm"
          query  = "avg_cpu"

          strategy "target-value" {
            target = 70
          }
        }
      }
    }

    spread {
      attribute = "${node.unique.id}"
    }

    affinity {
      attribute = "${meta.rack}"
      operator  = "regexp"
      value     = "r1.*"
      weight    = -30
    }

    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    constraint {
      operator  = "distinct_property"
      attribute = "${meta.rack}"
      value     = "2"
    }

    ephemeral_disk {
      size    = 500
      sticky  = true
      migrate = true
    }

    task "api" {
      driver = "raw_exec"

      affinity {
        attribute = "${attr.kernel.name}"
        value     = "linux"
        weight    = 10
      }

      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }
    }
  }
}
