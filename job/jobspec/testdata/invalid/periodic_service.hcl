job "j" {
  type = "service"
  periodic {
    crons = ["@daily"]
  }
  group "g" {
    task "t" {
      driver = "podman"
      config {
        image = "busybox:latest"
      }
    }
  }
}
