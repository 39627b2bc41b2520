# per_alloc: allocation N mounts the host volume "shared-data[N]".
job "vol" {
  group "g" {
    count = 2

    volume "data" {
      type      = "host"
      source    = "shared-data"
      per_alloc = true
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
