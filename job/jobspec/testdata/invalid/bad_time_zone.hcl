job "j" {
  type = "batch"
  periodic {
    crons     = ["@hourly"]
    time_zone = "Mars/Olympus_Mons"
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
