job "driver-typo" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "dockr"
      config {
        image = "busybox:latest"
      }
    }
  }
}
