# restart mode "delay": the task fails twice (its attempts, 1, used within
# the interval), waits out the interval, and its third run (a fresh
# attempt count) succeeds. The parity suite compares its task events
# (lifecycle_test.go).
job "parity-lc-delay" {
  datacenters = ["dc1"]
  type        = "batch"

  group "g" {
    restart {
      attempts = 1
      interval = "6s"
      delay    = "1s"
      mode     = "delay"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "flaky" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "f=$NOMAD_ALLOC_DIR/data/runs; echo x >> $f; n=$(wc -l < $f); echo run $n; [ $n -ge 3 ]"]
      }
    }
  }
}
