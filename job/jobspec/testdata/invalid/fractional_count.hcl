job "j" {
  type = "batch"
  group "g" {
    count = 1.5
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
