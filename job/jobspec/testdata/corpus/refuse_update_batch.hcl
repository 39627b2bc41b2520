job "batchy" {
  type = "batch"

  update {
    max_parallel = 1
  }

  group "g" {
    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }
    }
  }
}
