job "typo" {
  group "g" {
    task "t" {
      driver      = "raw_exec"
      kill_timout = "10s"

      config {
        command = "/bin/true"
      }
    }
  }
}
