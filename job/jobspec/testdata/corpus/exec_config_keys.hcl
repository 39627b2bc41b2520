job "hardened" {
  group "g" {
    task "t" {
      driver = "exec"

      config {
        command        = "/usr/bin/server"
        args           = ["--port", "8080"]
        work_dir       = "/srv"
        pid_mode       = "private"
        ipc_mode       = "host"
        cap_add        = ["net_bind_service"]
        cap_drop       = ["all"]
        oom_score_adj  = 500
        denied_envvars = ["AWS_*", "VAULT_TOKEN"]
      }
    }
  }
}
