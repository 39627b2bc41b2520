job "files" {
  group "g" {
    volume "shared" {
      type      = "host"
      source    = "shared-data"
      read_only = true
    }

    task "t" {
      driver = "exec"

      volume_mount {
        volume           = "shared"
        destination      = "/data"
        read_only        = true
        propagation_mode = "private"
      }

      config {
        command = "/bin/ls"
        args    = ["/data"]
      }
    }
  }
}
