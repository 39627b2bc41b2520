job "j" {
  group "g" {
    dynamic "task" {
      for_each = ["a", "b"]
      labels   = [task.value]

      content {
        driver = "raw_exec"
      }
    }
  }
}
