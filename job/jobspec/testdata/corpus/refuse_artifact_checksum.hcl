job "badsum" {
  group "g" {
    task "t" {
      driver = "raw_exec"

      artifact {
        source = "https://example.com/x.tar.gz"

        options {
          checksum = "sha256:abc"
        }
      }

      config {
        command = "/bin/true"
      }
    }
  }
}
