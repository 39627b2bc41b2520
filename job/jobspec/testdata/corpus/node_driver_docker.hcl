job "driver-docker" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image = "busybox:latest"
      }
    }
  }
}
