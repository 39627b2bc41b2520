job "svc" {
  periodic {
    crons = ["@daily"]
  }

  group "g" {
    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }
    }
  }
}
