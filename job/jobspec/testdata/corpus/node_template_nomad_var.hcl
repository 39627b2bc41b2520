job "template-nomad-var" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
      template {
        data        = <<EOT
x={{ nomadVar "nomad/jobs/j" }}
EOT
        destination = "local/x.env"
      }
    }
  }
}
