job "fetch-and-run" {
  type = "batch"

  group "g" {
    task "run" {
      driver = "raw_exec"

      artifact {
        source      = "https://releases.example.com/tool/v1.2.0/tool_linux_amd64.tar.gz"
        destination = "local/tool"

        options {
          checksum = "sha256:0f4b3b2c1a09e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3"
        }

        headers {
          User-Agent = "berth"
        }
      }

      artifact {
        source      = "https://example.com/config.yml"
        destination = "local/config.yml"
        mode        = "file"
      }

      artifact {
        source = "git::https://example.com/repo.git"
        mode   = "dir"
      }

      config {
        command = "local/tool/tool"
      }
    }
  }
}
