# Every construct jobspec accepts, with non-default values.
job "full" {
  type        = "service"
  namespace   = "team-a"
  region      = "eu"
  datacenters = ["dc1", "dc2"]
  priority    = 70
  meta = {
    owner = "ops"
    tier  = 2
  }

  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }
  constraint {
    attribute = "${attr.kernel.version}"
    operator  = "version"
    value     = ">= 5.10, < 99"
  }
  constraint {
    attribute = "${meta.rack}"
    operator  = "is_not_set"
  }

  group "api" {
    count = 2
    meta {
      role = "api"
    }
    restart {
      attempts = 5
      interval = "10m"
      delay    = "30s"
      mode     = "delay"
    }
    reschedule {
      delay_function = "fibonacci"
      max_delay      = "2h"
    }
    network {
      mode     = "cni/mynet"
      hostname = "api"
      port "http" {
        static = 8080
        to     = 80
      }
      port "metrics" {
        to           = -1
        host_network = "private"
      }
      dns {
        servers  = ["10.199.0.1", "fd00::1"]
        searches = ["svc.local"]
        options  = ["ndots:2"]
      }
      cni {
        args = {
          IgnoreUnknown = "true"
        }
      }
    }
    constraint {
      attribute = "${attr.cpu.numcores}"
      operator  = ">="
      value     = "1"
    }

    task "server" {
      driver       = "podman"
      leader       = true
      user         = "nobody"
      kill_timeout = "20s"
      env = {
        "LOG.LEVEL" = "debug"
      }
      config {
        image   = "localhost/busybox:latest"
        command = "httpd"
        args    = ["-f", "-p", "80"]
        ports   = ["http"]
        weight  = 1.5
        big     = 12345678901
        debug   = true
        labels = {
          app = "api"
        }
        mount {
          type   = "bind"
          source = "/srv"
        }
        mount {
          type   = "tmpfs"
          target = "/tmp"
        }
        logging {
          driver = "journald"
        }
      }
      resources {
        cpu        = 500
        memory     = 256
        memory_max = 512
      }
      restart {
        attempts = 1
      }
      constraint {
        attribute = "${node.unique.name}"
        operator  = "regexp"
        value     = "^test"
      }
    }

    task "sidecar" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["infinity"]
      }
      resources {
        cores = 1
      }
    }
  }
}
