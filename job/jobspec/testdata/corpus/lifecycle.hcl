job "app-with-hooks" {
  group "app" {
    network {
      mode = "bridge"
      port "http" {}
    }

    task "migrate-db" {
      driver = "raw_exec"

      lifecycle {
        hook    = "prestart"
        sidecar = false
      }

      config {
        command = "/bin/echo"
        args    = ["migrating"]
      }
    }

    task "log-shipper" {
      driver = "raw_exec"

      lifecycle {
        hook    = "prestart"
        sidecar = true
      }

      config {
        command = "/bin/sleep"
        args    = ["infinity"]
      }
    }

    task "app" {
      driver = "raw_exec"
      leader = true

      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }
    }

    task "announce" {
      driver = "raw_exec"

      lifecycle {
        hook = "poststart"
      }

      config {
        command = "/bin/echo"
        args    = ["up"]
      }
    }

    task "flush" {
      driver = "raw_exec"

      lifecycle {
        hook = "poststop"
      }

      config {
        command = "/bin/echo"
        args    = ["bye"]
      }
    }
  }
}
