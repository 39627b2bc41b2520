job "podman-no-image" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "podman"
      config {
        command = "/bin/sh"
      }
    }
  }
}
