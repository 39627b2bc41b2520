job "sys" {
  type = "system"

  group "g" {
    count = 3

    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }
    }
  }
}
