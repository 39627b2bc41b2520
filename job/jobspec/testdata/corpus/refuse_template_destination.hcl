job "tmpl" {
  group "g" {
    task "t" {
      driver = "raw_exec"

      template {
        data = "hello"
      }

      config {
        command = "/bin/true"
      }
    }
  }
}
