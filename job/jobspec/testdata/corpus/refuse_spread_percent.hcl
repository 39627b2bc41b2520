job "spready" {
  spread {
    attribute = "${node.datacenter}"

    target "dc1" {
      percent = 70
    }
    target "dc2" {
      percent = 40
    }
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
