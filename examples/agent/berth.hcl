# berth agent configuration: every setting, with its default.
# Run with: berth agent -config /etc/berth/berth.hcl
# Every setting but api.token is also a flag of `berth agent`, named as here with
# '-' for '_' and, inside a block, the block's name in front: --data-dir,
# --gc-interval, --bridge-subnet, --api-socket. A flag given on the command line
# wins over this file. Unknown settings are errors. The settings above gc_interval,
# the bridge block and the client block are the node's: every berth command takes
# them as flags.

# berth's state: the store (berth.db, owned by one process at a time), task logs
# (alloc/<id>/alloc/logs/<task>.stdout.N|stderr.N) and the podman service berth starts.
data_dir = "/var/lib/berth"

# Where network namespaces are pinned (as `ip netns` does).
netns_dir = "/run/netns"

# Cross-process network locks, shared with `berth net`, `berth gc` and `berth run`.
lock_dir = "/run/berth/lock"

# CNI configurations (network mode "cni/<name>" looks <name> up here), plugin
# directories searched in order, and libcni's cache (keep it: DEL needs it).
cni_config_dir = "/etc/cni/net.d"
cni_path       = ["/opt/berth/cni/bin", "/opt/cni/bin", "/usr/lib/cni"]
cni_cache_dir  = "/var/lib/cni"

# A podman service to use. Empty: berth starts its own on
# <data_dir>/podman/podman.sock the first time a task needs podman, and stops it
# when the agent stops.
podman_socket = ""

# Let podman tasks run privileged containers (privileged = true), which are
# root on the host (Nomad's docker allow_privileged). Off: such a job is refused.
podman_allow_privileged = false

# The docker driver's dockerd (scripts/image/docker-setup.sh starts one with
# berth's settings). Empty: DOCKER_HOST, then unix:///var/run/docker.sock.
docker_endpoint = ""

# As podman_allow_privileged, for docker tasks (Nomad's allow_privileged).
docker_allow_privileged = false

# The image of the pause container that holds a docker allocation's group
# network. Empty: localhost/berth-pause:latest (docker-setup.sh builds it).
docker_pause_image = ""

# Logs: level debug, info, warn or error; format text or json (log/slog).
log_level  = "info"
log_format = "text"

# Garbage collection: how often ("0" disables the periodic run; the reconcile at
# start always runs) and its scope: "full" (berth's records, plus a sweep of the
# host for leftovers of berth's networks; right when this agent is the only berth
# on the host) or "records" (this data dir's records only).
gc_interval = "5m"
gc_mode     = "full"

# Finished allocations (records and log directories) kept per job.
retention = 50

# How long `berth job stop` waits for a job's tasks and networks to be gone
# before answering "still stopping" (the stop goes on).
stop_timeout = "2m"

# SIGTERM/SIGINT leave the workloads running for the next agent to re-adopt
# (an upgrade: stop, replace the binary, start); true makes them drain first,
# as `berth agent drain` does: every task stopped, every network torn down.
drain_on_shutdown = false

# The network of `network { mode = "bridge" }` (Nomad's bridge mode): bridge,
# host-local IPAM on this subnet, firewall, portmap and loopback.
bridge {
  network = "berth"
  iface   = "berth0"
  subnet  = "10.199.1.0/24"
}

# What the node offers allocations and the limits it puts on them (Nomad's client
# block). Every task's resources (Nomad's defaults when it has no resources block:
# cpu 100 MHz, memory 300 MB) count against the node's CPU and memory less the
# reserve. An allocation that does not fit now waits, pending with the reason
# ("queued: waiting for memory: ..."); a job whose one launch could never fit
# (count x resources > the node) is refused by run and plan, naming the dimension.
client {
  # The node's CPU in MHz and memory in MB; 0 detects them: the CPUs berth may run
  # on times their maximum MHz (cpufreq, else /proc/cpuinfo), and MemTotal.
  cpu_total_compute = 0
  memory_total_mb   = 0

  # Allocations running at once, at most (a job whose launch needs more is refused).
  max_allocs = 1000

  # Allocations being started (network set up) at once; the others wait their turn.
  start_workers = 8

  # A periodic launch is skipped (with a warning) while this many earlier launches
  # of the job have allocations not started yet: a job that fires faster than the
  # node starts it does not pile up pending allocations. 0: no bound.
  max_pending_launches = 3

  # The longest kill_timeout a task gets: a stop or drain never waits longer for
  # one task (a job asking more gets this, with a warning at validate).
  max_kill_timeout = "30s"

  # The interface whose first IPv4 address the node advertises, as Nomad's:
  # NOMAD_IP_<label>, NOMAD_ADDR_<label>, NOMAD_HOST_*_<label>, services with
  # address_mode = "host" and ${attr.unique.network.ip-address}. Ports are
  # published on every host address; a task in a network namespace reaches the
  # host through this one (its own 127.0.0.1 is its namespace's). Unset: the
  # interface of the IPv4 default route (127.0.0.1, with a warning, without one);
  # "lo" advertises 127.0.0.1.
  # network_interface = "eth0"

  # Kept for the host (berth, the system) and not offered to allocations.
  reserved {
    cpu    = 0 # MHz
    memory = 0 # MB
  }

  # Host directories jobs may mount, as Nomad's: a group's
  # volume "x" { type = "host" source = "data" } and a task's
  # volume_mount { volume = "x" destination = "/data" } bind it into the task
  # (exec, podman; raw_exec cannot: run refuses such a task). read_only = true
  # makes every mount read-only. The path must exist. One block per volume;
  # a job's per_alloc = true volume with source "data" mounts "data[0]",
  # "data[1]", ... in its allocations. `berth run` takes
  # --client-host-volume data=/srv/data[:ro] instead.
  # host_volume "data" {
  #   path      = "/srv/data"
  #   read_only = false
  # }
}

api {
  # JSON over this unix socket, mode 0600 (root only); its directory is created 0700.
  socket = "/run/berth/berth.sock"

  # Each listener (the socket, TCP) serves this many connections at once; more
  # wait in the kernel's backlog until one closes.
  max_connections = 256

  # How long a client may take to send a whole request, headers and body; a
  # slower one is cut off.
  read_timeout = "30s"

  # Optionally also over TCP. Every TCP request must then carry
  # "Authorization: Bearer <token>"; the agent refuses to start a TCP listener
  # without a token (at least 16 characters). token_file wins over token and must
  # be readable by its owner only (chmod 600): the token is root on this node.
  # The agent reads this file, the TLS files and its own config only if each is
  # a regular file itself (no symlink, no FIFO).
  # /metrics is served there too (examples/prometheus/prometheus.yml scrapes it).
  # tcp_address = "127.0.0.1:4646"
  # token       = "change-me-to-a-long-random-string"
  # token_file  = "/etc/berth/token"

  # Nomad's HTTP API v1 for Nomad's own CLI and Go client, on a second TCP
  # address with the same token (NOMAD_TOKEN) and TLS:
  #   NOMAD_ADDR=http://127.0.0.1:4646 NOMAD_TOKEN=$(cat /etc/berth/token) nomad job status
  # Use a port Nomad's own agent does not (4646 when no Nomad runs here).
  # nomad_address = "127.0.0.1:4646"

  # An address that is not a literal loopback IP (127.0.0.1, [::1]; a host
  # name, even localhost, is not) needs TLS, unless allow_plaintext says the
  # token may cross the network in clear text.
  # allow_plaintext = false

  # TLS of the TCP API (clients use https://, `berth job ... --ca-cert`). With
  # ca_file, client certificates are verified against it (optional unless
  # verify_client); the bearer token is still required.
  tls {
    # cert_file     = "/etc/berth/tls/agent.pem"
    # key_file      = "/etc/berth/tls/agent-key.pem"
    # ca_file       = "/etc/berth/tls/ca.pem"
    # verify_client = false
  }
}

# The raw_exec and exec task drivers (Nomad's plugin settings and client options).
# Flags: --tasks-raw-exec-enabled, --tasks-user-denylist, ... (chroot_env: this file only).
tasks {
  # raw_exec runs tasks unisolated, as root unless they name a user (as in Nomad,
  # where it is off by default); false refuses jobs that use it.
  raw_exec_enabled = true

  # Users tasks of the checked drivers may not run as (Nomad's user.denylist and
  # user.checked_drivers); a user with a denied user's UID is denied too, so
  # "root" denies every UID-0 account. A task naming an unknown or denied user
  # is refused by validate, run and the API, at its `user` attribute.
  user_denylist        = ["root"]
  user_checked_drivers = ["exec"]

  # exec: the task's root is its task dir with these host paths bound into it
  # read-only (host path = path in the task's root), Nomad's chroot_env default;
  # missing ones are skipped. The alloc, local, secrets and tmp dirs are in it too.
  chroot_env = {
    "/bin"            = "/bin"
    "/etc"            = "/etc"
    "/lib"            = "/lib"
    "/lib32"          = "/lib32"
    "/lib64"          = "/lib64"
    "/run/resolvconf" = "/run/resolvconf"
    "/sbin"           = "/sbin"
    "/usr"            = "/usr"
  }

  # exec: what cap_add may ask for (Nomad's allow_caps default). Every task gets
  # these (within this list) less cap_drop plus cap_add; a task of another user
  # than root (exec's default is nobody) gets them as ambient capabilities, as
  # in Nomad 1.6.5. Narrow the list to narrow every task's default set.
  allow_caps = ["audit_write", "chown", "dac_override", "fowner", "fsetid", "kill", "mknod",
    "net_bind_service", "setfcap", "setgid", "setpcap", "setuid", "sys_chroot"]

  # exec tasks get PID and IPC namespaces of their own; these let a task ask for
  # pid_mode / ipc_mode = "host".
  allow_host_pid_mode = false
  allow_host_ipc_mode = false

  # exec tasks (and alloc exec into them) run under berth's default seccomp
  # filter: no namespaces, mounts, modules, BPF, ptrace, keyring... false turns
  # it off for this node; a job cannot.
  exec_seccomp = true
}

# Artifact fetches (Nomad's client artifact block, its defaults). Each fetch
# runs sandboxed as the task's user (see README.md, "Artifacts"); past a limit
# the task's setup fails with a "Failed Artifact Download" event.
# Flags: --artifact-http-read-timeout, --artifact-http-max-size, ...
artifact {
  # The whole fetch: download, checksum, unpacking.
  http_read_timeout = "30m"
  # Downloaded, and written (unpacked, decompressed, copied): KB/MB/GB or KiB/MiB/GiB.
  http_max_size            = "100GB"
  decompression_size_limit = "100GB"
  # Files, directories and links an artifact may make.
  decompression_file_count_limit = 4096
}

# Reclaim what Nomad leaves on this node (a Nomad client): the namespaces
# Nomad 1.6 to 1.10.0 leak, and the CNI state of allocations that are
# terminal or that Nomad forgot (see README.md, "Nomad clusters"). The agent
# then follows the local client agent's allocation events, reclaims an
# allocation's leftovers seconds after it turns terminal, and reconciles
# fully at start and every gc_interval. Settings left out come from the
# nomad CLI's environment (NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION,
# NOMAD_NAMESPACE, NOMAD_CACERT, NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY,
# NOMAD_TLS_SERVER_NAME). Flags: --nomad-address, --nomad-grace-period,
# --nomad-data-dir, --nomad-teardown-deadline.
# Absent by default.
# nomad {
#   address      = "http://127.0.0.1:4646"
#   token        = ""       # agent:read, node:read, read-job in every namespace
#   namespace    = "*"      # whose allocation events are followed
#   region       = ""
#   ca_cert      = ""
#   client_cert  = ""
#   client_key   = ""
#   tls_server_name = ""
#   grace_period = "1h"     # for what Nomad no longer knows
#   data_dir     = "/opt/nomad/data"  # Nomad's data_dir: its client's identity and alloc dirs are checked there
#   teardown_deadline = "10m"         # how long a terminal allocation's attachment is left to Nomad's teardown
#   reclaim_without_evidence = false  # namespaces named by UUIDs without an alloc dir are Nomad's too
# }
