# per_alloc in a sysbatch job: one allocation per node, refused by Nomad 1.6.5.
job "vol" {
  type = "sysbatch"

  group "g" {
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
