# The task's world, printed as key=value lines on stdout: its environment
# (names and values), its identity and capabilities, its working dir and
# the layout and modes of its directories. The parity suite runs this file
# unchanged on Nomad 1.6.5 and on berth and compares the lines.
locals {
  # Plain $VAR and $(...) only: "${" would be interpolated by HCL or by
  # the runtime, "%{" is an HCL template directive.
  world = <<EOT
p() { printf '%s=%s\n' "$1" "$2"; }
env | LC_ALL=C sort | while IFS= read -r l; do
  case "$l" in [A-Za-z_]*=*) printf 'env.%s\n' "$l" ;; esac
done
p id.uid "$(id -u)"
p id.gid "$(id -g)"
p id.groups "$(id -G)"
for c in CapInh CapPrm CapEff CapBnd CapAmb; do
  p cap.$c "$(sed -n "s/^$c:[[:space:]]*//p" /proc/self/status)"
done
p cwd "$(pwd)"
p umask "$(umask)"
# ls_dir NAME DIR DEPTH: the mode and type, and the owner, of DIR and of
# what is in it down to DEPTH.
ls_dir() {
  p "dir.$1" "$(stat -c '%a %F' "$2" 2>&1)"
  p "owner.$1" "$(stat -c '%U:%G' "$2" 2>&1)"
  find "$2" -mindepth 1 -maxdepth "$3" 2>/dev/null | LC_ALL=C sort | while IFS= read -r f; do
    rel=$(printf '%s' "$f" | sed "s|^$2||; s|^/||")
    p "dir.$1/$rel" "$(stat -c '%a %F' "$f" 2>&1)"
    p "owner.$1/$rel" "$(stat -c '%U:%G' "$f" 2>&1)"
  done
}
ls_dir task "$(dirname "$NOMAD_TASK_DIR")" 1
ls_dir local "$NOMAD_TASK_DIR" 2
ls_dir secrets "$NOMAD_SECRETS_DIR" 2
ls_dir alloc "$NOMAD_ALLOC_DIR" 2
EOT
}

job "parity-world" {
  datacenters = ["dc1"]
  type        = "batch"

  meta {
    team       = "blue"
    Mixed_Case = "kept"
    rack-id    = "r1"
  }

  group "raw" {
    meta {
      tier = "one"
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "raw" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", local.world]
      }
      meta {
        role = "printer"
      }
      env {
        FROM_BLOCK = "block-$${NOMAD_TASK_NAME}"
      }
      resources {
        cpu        = 120
        memory     = 64
        memory_max = 128
      }
    }
  }

  group "exec" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "exec" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", local.world]
      }
      resources {
        cpu    = 100
        memory = 48
      }
    }
  }
}
