# A nightly cleanup script, the simplest raw_exec batch job.
job "cleanup" {
  datacenters = ["dc1"]
  type        = "batch"

  group "cleanup" {
    task "prune" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "find /tmp -name 'berth-*' -mtime +7 -print"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
