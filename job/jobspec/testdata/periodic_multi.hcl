job "multi" {
  type = "batch"
  periodic {
    crons            = ["0 9 * * 1-5", "30 12 * * *"]
    time_zone        = "America/New_York"
    prohibit_overlap = true
    enabled          = false
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
