job "j" {
  type = "batch"
  all_at_onc = true
  group "g" {
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
