job "mem" {
  group "g" {
    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }

      resources {
        memory     = 512
        memory_max = 256
      }
    }
  }
}
