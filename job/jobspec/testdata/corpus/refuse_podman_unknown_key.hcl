job "pod" {
  group "g" {
    task "t" {
      driver = "podman"

      config {
        image  = "localhost/busybox:latest"
        mounts = ["/a:/b"]
      }
    }
  }
}
