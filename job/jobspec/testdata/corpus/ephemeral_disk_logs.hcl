job "chatty" {
  group "g" {
    ephemeral_disk {
      size = 2000
    }

    task "t" {
      driver = "raw_exec"

      logs {
        max_files     = 10
        max_file_size = 100
      }

      config {
        command = "/usr/bin/chatty"
      }
    }
  }
}
