job "j" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "podman"
      kill_timeout = "5 seconds"
      config {
        image = "busybox:latest"
      }
    }
  }
}
