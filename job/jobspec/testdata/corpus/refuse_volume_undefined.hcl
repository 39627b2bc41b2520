job "vol" {
  group "g" {
    task "t" {
      driver = "raw_exec"

      volume_mount {
        volume      = "data"
        destination = "/data"
      }

      config {
        command = "/bin/true"
      }
    }
  }
}
