# file() and friends: the path is relative to the working directory, as in
# Nomad, or to the job file's directory.
job "with-files" {
  type = "batch"

  meta {
    has_conf = fileexists("files/app.conf")
    conf_b64 = filebase64("files/app.conf")
    base     = basename("files/app.conf")
    dir      = dirname("files/app.conf")
  }

  group "g" {
    task "t" {
      driver = "raw_exec"

      env {
        APP_CONF = file("files/app.conf")
      }

      config {
        command = "/bin/cat"
      }
    }
  }
}
