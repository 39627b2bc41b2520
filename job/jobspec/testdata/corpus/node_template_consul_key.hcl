job "template-consul-key" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
      template {
        data        = <<EOT
x={{ key "app/config" }}
EOT
        destination = "local/x.env"
      }
    }
  }
}
