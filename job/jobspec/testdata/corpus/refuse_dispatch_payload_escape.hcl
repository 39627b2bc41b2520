job "payload" {
  type = "batch"

  parameterized {}

  group "g" {
    task "t" {
      driver = "raw_exec"

      dispatch_payload {
        file = "../../../etc/passwd"
      }

      config {
        command = "/bin/true"
      }
    }
  }
}
