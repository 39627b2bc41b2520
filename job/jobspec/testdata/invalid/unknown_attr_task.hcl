job "j" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "podman"
      kill_signals = "SIGINT"
      config {
        image = "busybox:latest"
      }
    }
  }
}
