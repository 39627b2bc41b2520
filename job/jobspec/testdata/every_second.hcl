job "tick" {
  type = "batch"
  periodic {
    crons     = ["*/1 * * * * * *"]
    time_zone = "Europe/Berlin"
  }
  group "g" {
    task "t" {
      driver = "exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
