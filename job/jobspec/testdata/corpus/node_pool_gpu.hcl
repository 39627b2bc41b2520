job "trainer" {
  node_pool = "gpu"
  type      = "batch"

  group "g" {
    task "t" {
      driver = "exec"

      config {
        command = "/usr/bin/train"
      }
    }
  }
}
