job "slash" {
  group "g" {
    task "a/b" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }
    }
  }
}
