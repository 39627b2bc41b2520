# The network a task sees, printed as key=value lines by each group's
# probe task: its NOMAD_* port and address variables, whether it has a
# network namespace of its own and (then) its interfaces' IPv4 addresses
# and default route, and whether each advertised address answers, from
# the task's namespace and from the host's (a listener task, a prestart
# sidecar, serves every port on NOMAD_PORT_<label> and answers its label).
# One group per network mode: cni (a bridge+portmap conflist the suite
# writes), bridge, host, none; each with a static and a dynamic port, with
# and without `to`. The suite runs it on Nomad 1.6.5 and on berth side by
# side: port_base and cni_network differ so that the two never take the
# same host port or network, and the suite normalises addresses and ports
# to their shape (alloc-ip, host-ip, <base+N>, <host-port-LABEL>).
variable "port_base" {
  type    = number
  default = 19400
}

# host_netns is the host's network namespace (the suite's own, as
# /proc/<pid>/ns/net): the probe connects from there too.
variable "host_netns" {
  type    = string
  default = "/proc/1/ns/net"
}

variable "cni_network" {
  type    = string
  default = "parity-net"
}

locals {
  # Plain $VAR and $(...) only: "${" would be interpolated by HCL or by
  # the runtime, "%{" is an HCL template directive.
  listen = <<EOT
use IO::Socket::INET;
my $dir = $ENV{NOMAD_ALLOC_DIR};
my @kids;
$SIG{INT} = $SIG{TERM} = sub { kill "TERM", @kids; exit 0 };
for my $k (sort keys %ENV) {
  next unless $k =~ /^NOMAD_PORT_(.+)$/;
  my $l = $1;
  my $pid = fork();
  if ($pid) { push @kids, $pid; next }
  $SIG{INT} = $SIG{TERM} = "DEFAULT";
  my $s = IO::Socket::INET->new(LocalAddr => "0.0.0.0", LocalPort => $ENV{$k}, Listen => 16, ReuseAddr => 1, Proto => "tcp");
  open(my $f, ">", "$dir/ready.$l.tmp");
  print $f ($s ? "listening" : "error: $!");
  close $f;
  rename("$dir/ready.$l.tmp", "$dir/ready.$l");
  exit 1 unless $s;
  while (my $c = $s->accept) { print $c "$l\n"; close $c }
  exit 0;
}
1 while wait() != -1;
EOT

  probe = <<EOT
p() { printf '%s=%s\n' "$1" "$2"; }
env | LC_ALL=C sort | grep -E '^NOMAD_[A-Z_]+_(stat|statto|dyn|dynto)=' | sed 's/^/env./'
if [ "$(readlink /proc/self/ns/net)" = "$(readlink "$HOST_NETNS")" ]; then
  p netns host
else
  p netns own
  /usr/sbin/ip -o link show | while read -r n name rest; do
    name=$(printf '%s' "$name" | sed 's/:$//; s/@.*//')
    p "link.$name" "$(/usr/sbin/ip -4 -o addr show dev "$name" | awk '{print $4}' | tr '\n' ' ' | sed 's/ $//')"
    p "link.$name.flags" "$(printf '%s' "$rest" | sed 's/ .*//')"
  done
  p route.default "$(/usr/sbin/ip -4 route show default)"
fi
# try ADDR: what a TCP connection to ADDR gets (the listener answers its
# port's label).
TRY='$SIG{ALRM} = sub { print "no answer"; exit 0 };
alarm 5;
my $s = IO::Socket::INET->new(PeerAddr => $ARGV[0], Proto => "tcp", Timeout => 3);
if (!$s) { print "error: $!"; exit 0 }
my $r = <$s>;
chomp $r;
print "answer: $r"'
for l in stat statto dyn dynto; do
  printenv "NOMAD_PORT_$l" >/dev/null || continue
  i=0
  while [ ! -e "$NOMAD_ALLOC_DIR/ready.$l" ] && [ $i -lt 60 ]; do sleep 0.5; i=$((i+1)); done
  p "listen.$l" "$(cat "$NOMAD_ALLOC_DIR/ready.$l" 2>/dev/null || echo none)"
  for v in ADDR ALLOC_ADDR HOST_ADDR; do
    a=$(printenv "NOMAD_$v"_"$l") || continue
    p "reach.$v.$l.task" "$(/usr/bin/perl -MIO::Socket::INET -e "$TRY" "$a")"
    p "reach.$v.$l.host" "$(/usr/bin/nsenter --net="$HOST_NETNS" /usr/bin/perl -MIO::Socket::INET -e "$TRY" "$a")"
  done
done
EOT
}

job "parity-network" {
  datacenters = ["dc1"]
  type        = "batch"

  group "cni" {
    network {
      mode = "cni/${var.cni_network}"
      port "stat" {
        static = var.port_base + 1
      }
      port "statto" {
        static = var.port_base + 2
        to     = var.port_base + 3
      }
      port "dyn" {}
      port "dynto" {
        to = var.port_base + 4
      }
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "cni-listen" {
      driver = "raw_exec"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        command = "/usr/bin/perl"
        args    = ["-e", local.listen]
      }
      kill_timeout = "2s"
    }
    task "cni-probe" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", local.probe]
      }
      env {
        HOST_NETNS = var.host_netns
      }
    }
  }

  group "bridge" {
    network {
      mode = "bridge"
      port "stat" {
        static = var.port_base + 11
      }
      port "statto" {
        static = var.port_base + 12
        to     = var.port_base + 13
      }
      port "dyn" {}
      port "dynto" {
        to = var.port_base + 14
      }
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "bridge-listen" {
      driver = "raw_exec"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        command = "/usr/bin/perl"
        args    = ["-e", local.listen]
      }
      kill_timeout = "2s"
    }
    task "bridge-probe" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", local.probe]
      }
      env {
        HOST_NETNS = var.host_netns
      }
    }
  }

  group "host" {
    network {
      mode = "host"
      port "stat" {
        static = var.port_base + 21
      }
      port "statto" {
        static = var.port_base + 22
        to     = var.port_base + 23
      }
      port "dyn" {}
      port "dynto" {
        to = var.port_base + 24
      }
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "host-listen" {
      driver = "raw_exec"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        command = "/usr/bin/perl"
        args    = ["-e", local.listen]
      }
      kill_timeout = "2s"
    }
    task "host-probe" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", local.probe]
      }
      env {
        HOST_NETNS = var.host_netns
      }
    }
  }

  group "none" {
    network {
      # No ports (berth refuses them in mode "none": nothing to publish
      # them on), so no listener.
      mode = "none"
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "none-probe" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", local.probe]
      }
      env {
        HOST_NETNS = var.host_netns
      }
    }
  }
}
