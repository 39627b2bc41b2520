job "checky" {
  group "g" {
    network {
      port "http" {}
    }

    service {
      name     = "checky"
      port     = "http"
      provider = "nomad"

      check {
        type = "http"
        path = "/"
      }
    }

    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }
    }
  }
}
