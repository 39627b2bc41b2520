# The job from the Nomad issue (hashicorp/nomad "nsutil.UnmountNS: CNI-created network namespace
# not cleaned up for short-lived jobs"), as written there, with two changes for a single machine
# without an image registry: the image is the locally built localhost/busybox:latest, and the
# placeholder hostname constraint is gone. In Nomad this fails within 3-4 runs with
# "failed to unmount NS: ... device or resource busy".
job "cni-debug" {
  type        = "batch"
  namespace   = "default"
  datacenters = ["S10"]

  periodic {
    crons            = ["*/1 * * * * *"]
    prohibit_overlap = false
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
        image   = "localhost/busybox:latest"
        command = "/bin/sh"
        args    = ["-c", "exit 0"]
      }
    }
  }
}
