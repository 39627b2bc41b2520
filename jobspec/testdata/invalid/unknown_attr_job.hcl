job "j" {
  type = "batch"
  all_at_once = true
  group "g" {
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
