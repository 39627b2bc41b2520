job "cni-debug" {
  type        = "batch"
  namespace   = "default"
  datacenters = ["S10"]
  periodic {
    crons            = ["*/1 * * * * *"]
    prohibit_overlap = false
  }
  constraint {
    attribute = "${attr.unique.hostname}"
    value     = "hostname"
  }
  group "debug" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    count = 1
    network {
      mode = "cni/private"
    }
    task "sleep" {
      driver = "podman"
      config {
        image   = "busybox:latest"
        command = "/bin/sh"
        args    = ["-c", "exit 0"]
      }
    }
  }
}
