# A dispatched job: its payload file and the dispatch meta as the task
# sees them (the parity suite dispatches it with greeting=hello and the
# payload testdata/payload.txt).
job "parity-dispatch" {
  datacenters = ["dc1"]
  type        = "batch"

  parameterized {
    payload       = "required"
    meta_required = ["greeting"]
    meta_optional = ["Lang"]
  }

  meta {
    Lang = "en"
  }

  group "d" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "dispatch" {
      driver = "raw_exec"
      dispatch_payload {
        file = "input/payload.txt"
      }
      config {
        command = "/bin/sh"
        args = ["-c", <<EOT
p() { printf '%s=%s\n' "$1" "$2"; }
env | LC_ALL=C sort | while IFS= read -r l; do
  case "$l" in NOMAD_*=*) printf 'env.%s\n' "$l" ;; esac
done
for f in "$NOMAD_TASK_DIR" "$NOMAD_TASK_DIR/input" "$NOMAD_TASK_DIR/input/payload.txt"; do
  rel=$(printf '%s' "$f" | sed "s|^$NOMAD_TASK_DIR|local|")
  p "dir.$rel" "$(stat -c '%a %F %s' "$f")"
  p "owner.$rel" "$(stat -c '%U:%G' "$f")"
done
p payload.content "$(cat "$NOMAD_TASK_DIR/input/payload.txt")"
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
