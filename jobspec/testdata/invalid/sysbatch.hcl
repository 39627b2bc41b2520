job "j" {
  type = "sysbatch"
  group "g" {
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
