job "j" {
  type = "batch"
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "windows"
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
