# berth's older "cwd" still works, with a warning: Nomad's name is work_dir.
job "old-cwd" {
  type = "batch"

  group "g" {
    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/pwd"
        cwd     = "/tmp"
      }
    }
  }
}
