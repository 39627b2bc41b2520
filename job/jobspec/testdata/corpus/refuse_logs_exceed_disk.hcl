job "logs" {
  group "g" {
    task "t" {
      driver = "raw_exec"

      logs {
        max_files     = 10
        max_file_size = 50
      }

      config {
        command = "/bin/true"
      }
    }
  }
}
