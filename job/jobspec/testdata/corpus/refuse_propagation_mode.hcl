# propagation_mode takes Nomad's names, not Docker's or Linux's.
job "vol" {
  group "g" {
    volume "data" {
      type   = "host"
      source = "shared-data"
    }

    task "t" {
      driver = "exec"

      volume_mount {
        volume           = "data"
        destination      = "/data"
        propagation_mode = "rslave"
      }

      config {
        command = "/bin/ls"
        args    = ["/data"]
      }
    }
  }
}
