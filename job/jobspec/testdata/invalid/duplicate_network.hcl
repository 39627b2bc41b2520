job "j" {
  type = "batch"
  group "g" {
    network {
      mode = "host"
    }
    network {
      mode = "bridge"
    }
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
