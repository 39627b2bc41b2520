job "j" {
  type = "batch"
  group "g" {
    restart {
      attempts = 1
      mode     = "retry"
    }
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
