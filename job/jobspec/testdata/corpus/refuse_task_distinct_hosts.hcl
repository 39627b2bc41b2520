job "distinct" {
  group "g" {
    task "t" {
      driver = "raw_exec"

      constraint {
        operator = "distinct_hosts"
        value    = "true"
      }

      config {
        command = "/bin/true"
      }
    }
  }
}
