job "j" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "podman"
      templates {
        data = "x"
      }
      config {
        image = "busybox:latest"
      }
    }
  }
}
