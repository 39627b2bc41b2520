# disconnect is Nomad 1.8's replacement for max_client_disconnect.
job "tolerant" {
  group "g" {
    disconnect {
      lost_after = "1h"
      replace    = false
      reconcile  = "keep_original"
    }

    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }
    }
  }
}
