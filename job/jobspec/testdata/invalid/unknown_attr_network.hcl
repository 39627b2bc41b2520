job "j" {
  type = "batch"
  group "g" {
    network {
      mode  = "bridge"
      bandwidth = 10
    }
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
