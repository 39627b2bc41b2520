# The older form: a task directly in the job, which Nomad turns into a
# group of the same name.
job "legacy" {
  datacenters = ["dc1"]
  type        = "batch"

  task "hello" {
    driver = "raw_exec"

    config {
      command = "/bin/echo"
      args    = ["hello"]
    }

    resources {
      cpu    = 50
      memory = 32
    }
  }
}
