job "interp" {
  type = "batch"
  meta {
    owner = "ops"
  }
  group "web" {
    network {
      mode = "bridge"
      port "http" {
        to = 8080
      }
    }
    task "server" {
      driver = "exec"
      env {
        ALLOC     = "${NOMAD_ALLOC_ID}"
        ADDR      = "${NOMAD_ALLOC_IP_http}:${NOMAD_PORT_http}"
        HOST      = "host-${attr.unique.hostname}"
        SPACED    = "${ NOMAD_TASK_NAME }"
        INDEXED   = "${meta.rack}-${NOMAD_ALLOC_INDEX}"
        ESCAPED   = "$${NOT_A_VAR}"
        CONSTANT  = "${1 + 1}"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo ${NOMAD_ALLOC_ID} ${NOMAD_JOB_NAME}/${NOMAD_GROUP_NAME}", "${env.HOME}"]
        script  = <<-EOT
          alloc=${NOMAD_ALLOC_ID}
          port=${NOMAD_HOST_PORT_http}
        EOT
        nested = {
          id = "${NOMAD_ALLOC_ID}"
        }
      }
    }
  }
}
