job "j" {
  type = "batch"
  group "g" {
    network {
      mode = "bridge"
      port "http" {
        to = 70000
      }
    }
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
