job "template-vault-secret" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
      template {
        data        = <<EOT
x={{ secret "db/creds" }}
EOT
        destination = "local/x.env"
      }
    }
  }
}
