# Blocks that only mean something to a cluster, at job level.
job "clustered" {
  datacenters = ["*"]
  all_at_once = false
  node_pool   = "default"

  update {
    max_parallel      = 2
    health_check      = "checks"
    min_healthy_time  = "10s"
    healthy_deadline  = "5m"
    progress_deadline = "10m"
    auto_revert       = true
    auto_promote      = false
    canary            = 1
  }

  migrate {
    max_parallel     = 1
    health_check     = "checks"
    min_healthy_time = "10s"
    healthy_deadline = "5m"
  }

  reschedule {
    delay          = "30s"
    delay_function = "exponential"
    max_delay      = "1h"
    unlimited      = true
  }

  spread {
    attribute = "${node.datacenter}"
    weight    = 100

    target "dc1" {
      percent = 60
    }
    target "dc2" {
      percent = 40
    }
  }

  affinity {
    attribute = "${attr.cpu.arch}"
    value     = "amd64"
    weight    = 50
  }

  group "g" {
    count = 3

    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }
    }
  }
}
