# Needs its variables from variables_json.vars.json (-var-file, JSON).
variable "replicas" {
  type = number
}

variable "labels" {
  type = map(string)
}

job "json-vars" {
  group "g" {
    count = var.replicas

    task "t" {
      driver = "podman"

      config {
        image  = "localhost/busybox:latest"
        labels = var.labels
      }
    }
  }
}
