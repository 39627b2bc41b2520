# A typo inside a dynamic block's content is reported where it is written.
locals {
  files = ["a.conf", "b.conf"]
}

job "typo" {
  datacenters = ["dc1"]

  group "g" {
    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }

      dynamic "template" {
        for_each = local.files
        content {
          data       = "x"
          destinaton = "local/${template.value}"
        }
      }
    }
  }
}
