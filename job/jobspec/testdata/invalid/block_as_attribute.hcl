job "j" {
  type = "batch"
  group "g" {
    restart = {
      attempts = 1
    }
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
