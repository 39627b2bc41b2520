job "undeclared" {
  group "g" {
    count = var.replicas

    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }
    }
  }
}
