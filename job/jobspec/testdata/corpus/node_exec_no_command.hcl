job "exec-no-command" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "exec"
      config {
        args = ["-c", "true"]
      }
    }
  }
}
