job "j" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "delay"
    }
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
