job "database" {
  group "db" {
    volume "data" {
      type            = "csi"
      source          = "pg-data"
      read_only       = false
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"

      mount_options {
        fs_type     = "ext4"
        mount_flags = ["noatime"]
      }
    }

    task "postgres" {
      driver = "podman"

      volume_mount {
        volume      = "data"
        destination = "/var/lib/postgresql/data"
      }

      config {
        image = "docker.io/library/postgres:16"
      }
    }
  }
}
