# Two elements generate the same task name.
job "dupes" {
  datacenters = ["dc1"]

  group "g" {
    dynamic "task" {
      for_each = ["api", "api"]
      labels   = [task.value]
      content {
        driver = "raw_exec"
        config {
          command = "/bin/true"
        }
      }
    }
  }
}
