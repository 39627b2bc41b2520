# access_mode is a CSI volume's: Nomad 1.6.5 refuses it on a host volume.
job "vol" {
  group "g" {
    volume "data" {
      type        = "host"
      source      = "shared-data"
      access_mode = "single-node-writer"
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
