job "worker" {
  group "workers" {
    restart {
      attempts = 3
      interval = "30m"
      delay    = "15s"
      mode     = "delay"
    }

    task "worker" {
      driver         = "exec"
      user           = "nobody"
      kill_signal    = "SIGTERM"
      kill_timeout   = "30s"
      shutdown_delay = "10s"

      restart {
        attempts = 5
        delay    = "5s"
      }

      logs {
        max_files     = 3
        max_file_size = 20
      }

      config {
        command  = "/usr/bin/worker"
        work_dir = "/srv/worker"
      }

      resources {
        cpu        = 500
        memory     = 256
        memory_max = 1024
      }
    }
  }
}
