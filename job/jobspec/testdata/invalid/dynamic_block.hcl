job "j" {
  group "g" {
    dynamic "task" {
      for_each = 3
      labels   = ["t${task.key}"]

      content {
        driver = "raw_exec"
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
