# Every config key of Nomad's podman task driver plugin.
job "podman-kitchen-sink" {
  group "app" {
    network {
      mode = "bridge"
      port "http" {
        to = 8080
      }
      port "metrics" {}
    }

    task "app" {
      driver = "podman"

      config {
        image              = "localhost/busybox:latest"
        command            = "/bin/httpd"
        args               = ["-f", "-p", "8080"]
        entrypoint         = ["/bin/sh", "-c"]
        working_dir        = "/srv"
        hostname           = "app"
        network_mode       = "bridge"
        ports              = ["http", "metrics"]
        dns                = ["10.199.130.1"]
        extra_hosts        = ["db.internal:10.199.130.10"]
        volumes            = ["/srv/data:/data", "local/config:/etc/app:ro"]
        tmpfs              = ["/run:size=64m", "/tmp"]
        devices            = ["/dev/fuse"]
        cap_add            = ["NET_ADMIN", "SYS_TIME"]
        cap_drop           = ["MKNOD"]
        security_opt       = ["no-new-privileges"]
        selinux_opts       = ["type:container_t"]
        apparmor_profile   = "unconfined"
        privileged         = false
        readonly_rootfs    = true
        userns             = "keep-id"
        init               = true
        init_path          = "/usr/libexec/podman/catatonit"
        tty                = false
        shm_size           = "64m"
        memory_reservation = "128m"
        memory_swap        = "512m"
        memory_swappiness  = 10
        pids_limit         = 200
        cpu_hard_limit     = true
        cpu_cfs_period     = 100000
        socket             = "default"
        auth_soft_fail     = true
        force_pull         = false
        image_pull_timeout = "10m"

        labels = {
          team = "platform"
        }
        sysctl = {
          "net.core.somaxconn" = "1024"
        }
        ulimit = {
          nofile = "4096:8192"
          nproc  = "256"
        }

        logging {
          driver = "nomad"
        }

        auth {
          username   = "robot"
          password   = "secret"
          tls_verify = true
        }
      }
    }
  }
}
