job "batchy" {
  type = "batch"

  group "g" {
    migrate {
      max_parallel = 1
    }

    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }
    }
  }
}
