# for_each must be a collection: a count is not one.
job "replicas" {
  datacenters = ["dc1"]

  group "g" {
    dynamic "task" {
      for_each = 3
      labels   = ["t"]
      content {
        driver = "raw_exec"
        config {
          command = "/bin/true"
        }
      }
    }

    task "main" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
