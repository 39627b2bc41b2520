job "j" {
  type = "batch"
  group "g" {
    network {
      mode = "bridged"
    }
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
