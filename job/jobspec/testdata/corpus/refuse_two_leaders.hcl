job "leaders" {
  group "g" {
    task "a" {
      driver = "raw_exec"
      leader = true

      config {
        command = "/bin/true"
      }
    }

    task "b" {
      driver = "raw_exec"
      leader = true

      config {
        command = "/bin/true"
      }
    }
  }
}
