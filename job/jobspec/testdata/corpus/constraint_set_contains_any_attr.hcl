# set_contains_any has no attribute form in a constraint (only in an
# affinity): Nomad 1.6.5 reads it, keeps operator "=" and wants a value.
job "tagged" {
  datacenters = ["dc1"]

  group "g" {
    constraint {
      attribute        = "${meta.tags}"
      set_contains_any = "ssd,nvme"
    }

    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
