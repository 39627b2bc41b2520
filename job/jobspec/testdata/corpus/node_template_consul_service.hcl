job "template-consul-service" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
      template {
        data        = <<EOT
x={{ range service "web" }}{{ end }}
EOT
        destination = "local/x.env"
      }
    }
  }
}
