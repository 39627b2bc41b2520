job "template-syntax" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
      template {
        data        = "x={{ if }}"
        destination = "local/x.env"
      }
    }
  }
}
