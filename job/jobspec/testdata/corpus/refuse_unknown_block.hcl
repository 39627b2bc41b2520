job "typo" {
  group "g" {
    deployment {
      canary = 1
    }

    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }
    }
  }
}
