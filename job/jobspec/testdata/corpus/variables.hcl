variable "datacenters" {
  type        = list(string)
  default     = ["dc1"]
  description = "Where to run"
}

variable "count" {
  type    = number
  default = 3

  validation {
    condition     = var.count > 0 && var.count < 10
    error_message = "The count must be between 1 and 9."
  }
}

variable "image" {
  type    = string
  default = "localhost/busybox:latest"
}

variable "env" {
  type = map(string)
  default = {
    MODE = "production"
  }
}

variables {
  region_name = "global"
  tags        = ["a", "b"]
}

locals {
  name     = "api-${var.region_name}"
  replicas = var.count * 2
  all_tags = concat(var.tags, ["generated"])
}

job "api" {
  datacenters = var.datacenters
  region      = var.region_name

  meta {
    replicas = local.replicas
    tags     = join(",", local.all_tags)
  }

  group "api" {
    count = var.count

    task "api" {
      driver = "podman"
      env    = merge(var.env, { NAME = local.name })

      config {
        image = var.image
        args  = [for t in local.all_tags : upper(t)]
      }
    }
  }
}
