job "j" {
  type = "batch"
  constraint {
    attribute = attr.kernel.name
    value     = "linux"
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
