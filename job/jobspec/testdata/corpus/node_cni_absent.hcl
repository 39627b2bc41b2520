job "cni-absent" {
  type = "batch"
  group "g" {
    network {
      mode = "cni/nope"
    }
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
