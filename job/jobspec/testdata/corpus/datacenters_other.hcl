job "elsewhere" {
  datacenters = ["us-east-1a", "us-east-1b"]

  group "g" {
    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
      }
    }
  }
}
