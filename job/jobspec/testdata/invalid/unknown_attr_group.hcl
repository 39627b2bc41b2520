job "j" {
  type = "batch"
  group "g" {
    cont = 2
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
