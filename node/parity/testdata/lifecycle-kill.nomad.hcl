# A task stopped from outside (nomad job stop; berth: its run stopped):
# it gets its kill_signal, says so and exits. The parity suite compares its
# task events (lifecycle_test.go); "ready" on stdout says the trap is set.
job "parity-lc-kill" {
  datacenters = ["dc1"]
  type        = "batch"

  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "victim" {
      driver       = "raw_exec"
      kill_signal  = "SIGINT"
      kill_timeout = "7s"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'echo interrupted; exit 0' INT; echo ready; while :; do sleep 0.1; done"]
      }
    }
  }
}
