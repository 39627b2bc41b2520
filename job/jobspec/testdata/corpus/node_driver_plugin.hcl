job "driver-plugin" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "containerd-driver"
      config {
        image = "docker.io/library/busybox:latest"
      }
    }
  }
}
