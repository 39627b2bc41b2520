job "racks" {
  datacenters = ["dc1"]

  group "g" {
    count = 2

    constraint {
      distinct_property = "${meta.rack}"
      value             = "0"
    }

    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
