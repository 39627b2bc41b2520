# Even an empty mount_options block is refused on a host volume.
job "vol" {
  group "g" {
    volume "data" {
      type   = "host"
      source = "shared-data"

      mount_options {}
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
