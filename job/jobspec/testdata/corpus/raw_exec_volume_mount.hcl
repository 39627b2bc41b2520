# A raw_exec task cannot mount a host volume: Nomad 1.6.5 validates the job and fails the task when it starts.
job "vol" {
  group "g" {
    volume "data" {
      type   = "host"
      source = "shared-data"
    }

    task "t" {
      driver = "raw_exec"

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
