job "j" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "podman"
      template {
        data = "x"
      }
      config {
        image = "busybox:latest"
      }
    }
  }
}
