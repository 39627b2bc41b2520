# Capabilities and the special filesystems of a task's root (issue 23
# items 1 and 8): each task prints its capability sets, whether it may
# bind a privileged port (as nobody: by Nomad's default set, as ambient
# capabilities), the mounts of /sys, /dev/pts, /dev/mqueue and its
# secrets dir, and /dev/ptmx. The parity suite runs this file unchanged
# on Nomad 1.6.5 and on berth and compares the lines.
locals {
  # Plain $VAR and $(...) only: "${" would be interpolated by HCL or by
  # the runtime, "%{" is an HCL template directive.
  caps = <<EOT
p() { printf '%s=%s\n' "$1" "$2"; }
p id.uid "$(id -u)"
for c in CapInh CapPrm CapEff CapBnd CapAmb; do
  p cap.$c "$(sed -n "s/^$c:[[:space:]]*//p" /proc/self/status)"
done
# A privileged port on a loopback address of its own (tasks of both
# systems run side by side on the host's network).
p bind.port80 "$(perl -MSocket -e '
  socket(S, PF_INET, SOCK_STREAM, 0) or die "socket: $!";
  setsockopt(S, SOL_SOCKET, SO_REUSEADDR, 1);
  my $a = inet_aton(join(".", 127, 1 + int(rand(250)), int(rand(250)), 1 + int(rand(250))));
  print bind(S, pack_sockaddr_in(80, $a)) ? "ok" : "$!";' 2>&1)"
# mnt.<path>: the filesystem type, the mount's options and the
# filesystem's, as /proc/self/mountinfo has them (the last mount wins).
mnt() {
  p "mnt.$1" "$(awk -v m="$2" '$5 == m { for (i = 7; $i != "-"; i++); v = $(i+1) " " $6 " " $(i+3) } END { print v }' /proc/self/mountinfo)"
}
if [ "$NOMAD_SECRETS_DIR" = /secrets ]; then
  mnt sys /sys
  mnt dev /dev
  mnt dev/pts /dev/pts
  mnt dev/mqueue /dev/mqueue
  mnt dev/shm /dev/shm
  p dev.ptmx "$(stat -c '%a %F' /dev/ptmx 2>&1) $(readlink /dev/ptmx)"
  p dev.list "$(ls -A /dev | tr '\n' ' ')"
  p sys.write "$(touch /sys/berth-parity 2>&1 | sed 's/.*: //')"
  p sys.firmware "$(ls -A /sys/firmware 2>&1 | tr '\n' ' ')"
fi
mnt secrets "$NOMAD_SECRETS_DIR"
p dir.secrets "$(stat -c '%a %U:%G' "$NOMAD_SECRETS_DIR")"
p fs.secrets "$(stat -f -c %T "$NOMAD_SECRETS_DIR")"
EOT
}

job "parity-caps" {
  datacenters = ["dc1"]
  type        = "batch"

  group "nobody" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "nobody" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", local.caps]
      }
      resources {
        cpu    = 100
        memory = 48
      }
    }
  }

  group "dropped" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "dropped" {
      driver = "exec"
      config {
        command  = "/bin/sh"
        args     = ["-c", local.caps]
        cap_drop = ["all"]
        cap_add  = ["net_bind_service", "chown"]
      }
      resources {
        cpu    = 100
        memory = 48
      }
    }
  }

  group "lessdac" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "lessdac" {
      driver = "exec"
      config {
        command  = "/bin/sh"
        args     = ["-c", local.caps]
        cap_drop = ["dac_override", "net_bind_service"]
      }
      resources {
        cpu    = 100
        memory = 48
      }
    }
  }

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
        args    = ["-c", local.caps]
      }
      resources {
        cpu    = 100
        memory = 48
      }
    }
  }
}
