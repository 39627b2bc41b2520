job "j" {
  type = "batch"
  periodic {
    crons = ["*/1 * * * * *", "every minute"]
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
