# The older podman forms: port_map instead of ports.
job "redis" {
  group "cache" {
    network {
      port "db" {}
    }

    task "redis" {
      driver = "podman"

      config {
        image = "docker.io/library/redis:7"
        port_map {
          db = 6379
        }
      }

      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
