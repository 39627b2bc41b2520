job "j" {
  type = "batch"
  group "g" {
    meta = {
      a = 1e99999999
    }
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
