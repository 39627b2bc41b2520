# A batch task that fails at once, with no restart: the default batch
# reschedule policy (one reschedule within 24 h, after 5 s) replaces its
# allocation once. The parity suite compares the sequence of allocations
# (names, indexes, statuses, the links between them) and what each task
# saw of its index and name.
job "parity-reschedule" {
  datacenters = ["dc1"]
  type        = "batch"

  group "r" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "reschedule" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo index=$NOMAD_ALLOC_INDEX name=$NOMAD_ALLOC_NAME; exit 3"]
      }
      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
