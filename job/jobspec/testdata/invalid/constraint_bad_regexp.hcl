job "j" {
  type = "batch"
  constraint {
    attribute = "${attr.kernel.name}"
    operator  = "regexp"
    value     = "lin(ux"
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
