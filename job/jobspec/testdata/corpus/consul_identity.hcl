job "meshy" {
  group "g" {
    consul {
      namespace = "team-a"
    }

    network {
      mode = "bridge"
      port "http" {
        to = 8080
      }
    }

    service {
      name = "meshy"
      port = "http"

      connect {
        sidecar_service {}
      }
    }

    task "t" {
      driver = "exec"

      identity {
        env  = true
        file = true
      }

      config {
        command = "/usr/bin/meshy"
      }
    }
  }
}
