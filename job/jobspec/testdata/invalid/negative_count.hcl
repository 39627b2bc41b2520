job "j" {
  type = "batch"
  group "g" {
    count = -1
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
