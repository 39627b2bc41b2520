job "user-unknown" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "exec"
      user   = "berth-corpus-no-such-user"
      config {
        command = "/bin/true"
      }
    }
  }
}
