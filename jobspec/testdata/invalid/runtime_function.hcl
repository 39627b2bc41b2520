job "j" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "podman"
      env {
        NAME = "${upper(NOMAD_JOB_NAME)}"
      }
      config {
        image = "busybox:latest"
      }
    }
  }
}
