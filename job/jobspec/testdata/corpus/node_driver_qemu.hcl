job "driver-qemu" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "qemu"
      config {
        image_path = "local/disk.img"
      }
    }
  }
}
