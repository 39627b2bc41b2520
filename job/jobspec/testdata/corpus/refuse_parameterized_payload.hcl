job "param" {
  type = "batch"

  parameterized {
    payload       = "sometimes"
    meta_required = ["a"]
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
