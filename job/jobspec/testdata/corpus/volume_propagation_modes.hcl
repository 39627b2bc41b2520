# Each propagation_mode, for exec and podman; bidirectional on a read-only
# mount is accepted (Nomad 1.6.5 does not check it).
job "propagation" {
  group "g" {
    volume "mnt" {
      type   = "host"
      source = "mnt"
    }

    task "watcher" {
      driver = "exec"

      volume_mount {
        volume           = "mnt"
        destination      = "/mnt/host"
        propagation_mode = "host-to-task"
      }

      volume_mount {
        volume           = "mnt"
        destination      = "/mnt/private"
        propagation_mode = "private"
      }

      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }
    }

    task "mounter" {
      driver = "podman"

      volume_mount {
        volume           = "mnt"
        destination      = "/mnt/shared"
        propagation_mode = "bidirectional"
      }

      volume_mount {
        volume           = "mnt"
        destination      = "/mnt/ro"
        read_only        = true
        propagation_mode = "bidirectional"
      }

      config {
        image   = "busybox:latest"
        command = "sleep"
        args    = ["3600"]
      }
    }
  }
}
