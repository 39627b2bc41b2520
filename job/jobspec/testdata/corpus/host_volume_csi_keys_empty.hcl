# An empty access_mode and attachment_mode are "unset" for Nomad: a valid host volume.
job "vol" {
  group "g" {
    volume "data" {
      type            = "host"
      source          = "shared-data"
      access_mode     = ""
      attachment_mode = ""
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
