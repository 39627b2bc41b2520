job "j" {
  type = "batch"
  periodic {
    cron = "0 0 * * * * * 2030"
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
