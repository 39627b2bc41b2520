job "neg" {
  group "g" {
    task "t" {
      driver       = "raw_exec"
      kill_timeout = "-5s"

      config {
        command = "/bin/true"
      }
    }
  }
}
