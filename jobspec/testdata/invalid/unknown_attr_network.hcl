job "j" {
  type = "batch"
  group "g" {
    network {
      mode  = "bridge"
      mbits = 10
    }
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
