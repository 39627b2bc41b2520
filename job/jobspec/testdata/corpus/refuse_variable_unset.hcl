variable "image" {
  type = string
}

job "needs-var" {
  group "g" {
    task "t" {
      driver = "podman"

      config {
        image = var.image
      }
    }
  }
}
