job "sys" {
  type = "system"

  group "g" {
    reschedule {
      attempts = 1
    }

    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }
    }
  }
}
