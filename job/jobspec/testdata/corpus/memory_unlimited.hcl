job "bursty" {
  group "g" {
    task "t" {
      driver = "exec"

      config {
        command = "/usr/bin/bursty"
      }

      resources {
        memory     = 256
        memory_max = -1
      }
    }
  }
}
