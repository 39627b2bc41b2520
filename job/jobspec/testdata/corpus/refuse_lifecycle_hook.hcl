job "hooks" {
  group "g" {
    task "init" {
      driver = "raw_exec"

      lifecycle {
        hook = "prerun"
      }

      config {
        command = "/bin/true"
      }
    }

    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }
    }
  }
}
