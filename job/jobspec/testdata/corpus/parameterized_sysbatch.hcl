job "flush-caches" {
  type = "sysbatch"

  parameterized {
    payload       = "forbidden"
    meta_optional = ["level"]
  }

  group "flush" {
    task "flush" {
      driver = "raw_exec"

      config {
        command = "/bin/sync"
      }
    }
  }
}
