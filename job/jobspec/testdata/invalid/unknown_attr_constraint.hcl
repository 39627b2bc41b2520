job "j" {
  type = "batch"
  constraint {
    attribute = "${attr.kernel.name}"
    versions  = ">= 5.0"
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
