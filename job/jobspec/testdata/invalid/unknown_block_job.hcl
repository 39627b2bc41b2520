job "j" {
  type = "batch"
  deployment {
    max_parallel = 1
  }
  group "g" {
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
