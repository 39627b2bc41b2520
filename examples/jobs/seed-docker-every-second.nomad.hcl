# The seed job on the docker driver (Docker Engine, docker.io): the podman seed
# (seed-podman-every-second.nomad.hcl) with driver = "docker", to compare the two.
# scripts/setup.sh starts dockerd and loads localhost/busybox:latest into it.
job "cni-debug-docker" {
  type        = "batch"
  namespace   = "default"
  datacenters = ["S10"]

  periodic {
    crons            = ["*/1 * * * * * *"]
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
      driver = "docker"

      config {
        image   = "localhost/busybox:latest"
        command = "/bin/sh"
        args    = ["-c", "exit 0"]
      }
    }
  }
}
