job "bounded" {
  type = "batch"

  group "g" {
    task "t" {
      driver           = "raw_exec"
      max_run_duration = "15m"

      config {
        command = "/usr/bin/long-job"
      }
    }
  }
}
