job "j" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "podman"
      env = ["A=1"]
      config {
        image = "busybox:latest"
      }
    }
  }
}
