# The attribute forms of constraints from Nomad's constraint documentation.
job "spread-out" {
  datacenters = ["dc1"]

  constraint {
    attribute = "${attr.kernel.version}"
    version   = ">= 3.10"
  }

  constraint {
    attribute = "${attr.os.name}"
    regexp    = "^(debian|ubuntu)$"
  }

  group "cache" {
    count = 3

    constraint {
      distinct_hosts = true
    }

    constraint {
      distinct_property = "${meta.rack}"
      value             = "2"
    }

    constraint {
      attribute = "${attr.kernel.version}"
      semver    = ">= 3.10.0"
    }

    task "redis" {
      driver = "raw_exec"

      config {
        command = "/usr/bin/redis-server"
      }
    }
  }
}
