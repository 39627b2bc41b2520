job "aff" {
  affinity {
    attribute = "${attr.kernel.name}"
    value     = "linux"
    weight    = 0
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
