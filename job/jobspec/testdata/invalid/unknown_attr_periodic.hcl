job "j" {
  type = "batch"
  periodic {
    crons = ["@daily"]
    spec  = "@hourly"
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
