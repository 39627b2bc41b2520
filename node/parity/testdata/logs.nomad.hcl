# Logs: each task writes more than one file's worth of stdout (lines of a
# counter) with the smallest rotation Nomad allows (1 MB files, 2 kept),
# waits for its log writer to settle, then prints what it sees in
# $NOMAD_ALLOC_DIR/logs (names, sizes, modes, owners). The parity suite
# compares those lines and what `alloc logs` returns (read.* facts).
locals {
  logs = <<EOT
seq -w 1 300000
echo to-stderr >&2
sleep 3
d="$NOMAD_ALLOC_DIR/logs"
out="seen.dir=$(stat -c '%a %U:%G' "$d")"
# A stdout file's size is where the writer cut it (logmon at its reads'
# boundaries): not printed.
for f in $(ls -A "$d" | LC_ALL=C sort); do
  case "$f" in
    *.stdout.*) s="" ;;
    *) s="$(stat -c '%s' "$d/$f") " ;;
  esac
  out="$out
seen.$f=$s$(stat -c '%a %F %U:%G' "$d/$f")"
done
printf '%s\n' "$out"
EOT
}

job "parity-logs" {
  datacenters = ["dc1"]
  type        = "batch"

  group "raw" {
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
        args    = ["-c", local.logs]
      }
      logs {
        max_files     = 2
        max_file_size = 1
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
        args    = ["-c", local.logs]
      }
      logs {
        max_files     = 2
        max_file_size = 1
      }
    }
  }
}
