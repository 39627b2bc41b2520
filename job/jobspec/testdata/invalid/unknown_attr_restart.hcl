job "j" {
  type = "batch"
  group "g" {
    restart {
      attempts         = 1
      render_templates = true
    }
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
