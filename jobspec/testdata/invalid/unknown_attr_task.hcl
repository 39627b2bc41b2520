job "j" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "podman"
      kill_signal = "SIGINT"
      config {
        image = "busybox:latest"
      }
    }
  }
}
