job "mixed" {
  group "g" {
    network {
      port "http" {}
    }

    service {
      name     = "a"
      port     = "http"
      provider = "consul"
    }

    task "t" {
      driver = "raw_exec"

      service {
        name     = "b"
        port     = "http"
        provider = "nomad"
      }

      config {
        command = "/bin/true"
      }
    }
  }
}
