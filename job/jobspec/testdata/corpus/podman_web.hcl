job "nginx" {
  datacenters = ["dc1"]
  type        = "service"

  group "nginx" {
    network {
      port "http" {
        to = 80
      }
    }

    task "nginx" {
      driver = "podman"

      config {
        image   = "docker.io/library/nginx:1.25"
        ports   = ["http"]
        volumes = ["local/default.conf:/etc/nginx/conf.d/default.conf:ro"]

        logging = {
          driver = "journald"
          options = {
            tag = "nginx"
          }
        }
      }

      resources {
        cpu    = 250
        memory = 256
      }
    }
  }
}
