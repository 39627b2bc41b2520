job "j" {
  type = "batch"
  constraint {
    attribute = "${attr.unique.hostnam}"
    value     = "x"
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
