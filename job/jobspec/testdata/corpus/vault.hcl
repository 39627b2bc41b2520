job "secrets-reader" {
  vault {
    policies = ["read-secrets"]
  }

  group "g" {
    task "t" {
      driver = "exec"

      vault {
        policies      = ["db"]
        change_mode   = "signal"
        change_signal = "SIGHUP"
      }

      template {
        data        = <<EOT
{{ with secret "database/creds/app" }}DB_USER={{ .Data.username }}{{ end }}
EOT
        destination = "secrets/db.env"
        env         = true
      }

      config {
        command = "/usr/bin/reader"
      }
    }
  }
}
