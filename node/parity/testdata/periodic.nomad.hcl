# A periodic job's launch: the child job's identity as its task sees it
# (NOMAD_JOB_ID, NOMAD_JOB_NAME, NOMAD_JOB_PARENT_ID, NOMAD_ALLOC_NAME).
# The parity suite reads its first launch and stops the job.
job "parity-periodic" {
  datacenters = ["dc1"]
  type        = "batch"

  periodic {
    crons            = ["*/1 * * * * * *"]
    prohibit_overlap = true
  }

  group "p" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "periodic" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args = ["-c", <<EOT
env | LC_ALL=C sort | while IFS= read -r l; do
  case "$l" in NOMAD_*=*) printf 'env.%s\n' "$l" ;; esac
done
EOT
        ]
      }
      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
