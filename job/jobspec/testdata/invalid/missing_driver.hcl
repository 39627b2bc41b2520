job "j" {
  type = "batch"
  group "g" {
    task "t" {
      config {
        image = "busybox:latest"
      }
    }
  }
}
