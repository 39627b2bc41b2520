job "j" {
  type = "batch"
  group "g" {
    network {
      mode = "bridge"
      dns {
        servers = ["one.one.one.one"]
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
