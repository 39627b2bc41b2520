# Forms from the HCL1 days that Nomad still reads: meta and env as blocks
# or attributes, the task-level network resources with mbits.
job "old-style" {
  meta = {
    owner = "ops"
  }

  group "g" {
    meta {
      tier = "1"
    }

    task "t" {
      driver = "exec"

      env = {
        A = "1"
      }

      meta {
        team = "core"
      }

      config {
        command = "/bin/true"
      }

      resources {
        cpu    = 100
        memory = 64

        network {
          mbits = 10
        }
      }
    }
  }
}
