job "picky" {
  constraint {
    attribute = "${attr.kernel.version}"
    operator  = "version"
    value     = ">= 3.10"
  }

  constraint {
    attribute = "${attr.cpu.numcores}"
    operator  = ">="
    value     = "1"
  }

  constraint {
    attribute = "${meta.gpu}"
    operator  = "is_not_set"
  }

  group "g" {
    constraint {
      attribute = "${attr.os.name}"
      operator  = "regexp"
      value     = "^(debian|ubuntu)$"
    }

    task "t" {
      driver = "raw_exec"

      constraint {
        attribute = "${attr.cpu.arch}"
        operator  = "set_contains_any"
        value     = "amd64,arm64"
      }

      config {
        command = "/bin/true"
      }
    }
  }
}
