# A service job with a port, a Nomad service and an HTTP check: busybox's
# httpd in podman, in the "private" CNI network. `nomad job run` of it
# waits for its deployment to be healthy (the check passing).
job "web" {
  type = "service"

  group "web" {
    network {
      mode = "cni/private"
      port "http" {
        to = 8080
      }
    }

    service {
      name     = "web"
      port     = "http"
      provider = "nomad"

      check {
        type     = "http"
        path     = "/"
        interval = "2s"
        timeout  = "1s"
      }
    }

    task "httpd" {
      driver = "podman"

      config {
        image   = "localhost/busybox:latest"
        command = "/bin/sh"
        args    = ["-c", "mkdir -p /tmp/www && echo hello from $NOMAD_ALLOC_ID > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
