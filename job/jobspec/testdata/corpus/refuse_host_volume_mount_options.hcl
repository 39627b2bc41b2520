# mount_options is a CSI volume's: Nomad 1.6.5 refuses it on a host volume.
job "vol" {
  group "g" {
    volume "data" {
      type   = "host"
      source = "shared-data"

      mount_options {
        fs_type     = "ext4"
        mount_flags = ["noatime"]
      }
    }

    task "t" {
      driver = "exec"

      volume_mount {
        volume      = "data"
        destination = "/data"
      }

      config {
        command = "/bin/ls"
        args    = ["/data"]
      }
    }
  }
}
