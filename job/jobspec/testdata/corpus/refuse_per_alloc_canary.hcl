# per_alloc with canaries: a canary would mount its twin's volume; Nomad
# 1.6.5 refuses it.
job "vol" {
  update {
    canary = 1
  }

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
