# berth agent configuration: every setting, with its default.
# Run with: berth agent -config /etc/berth/berth.hcl
# Every setting but api.token is also a flag of `berth agent`, named as here with
# '-' for '_' and, inside a block, the block's name in front: --data-dir,
# --gc-interval, --bridge-subnet, --api-socket. A flag given on the command line
# wins over this file. Unknown settings are errors. The settings above gc_interval
# and the bridge block are the node's: every berth command takes them as flags.

# berth's state: the store (berth.db, owned by one process at a time), task logs
# (alloc/<id>/<task>.stdout|stderr) and the podman service berth starts.
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

# The network of `network { mode = "bridge" }` (Nomad's bridge mode): bridge,
# host-local IPAM on this subnet, firewall, portmap and loopback.
bridge {
  network = "berth"
  iface   = "berth0"
  subnet  = "10.199.1.0/24"
}

api {
  # JSON over this unix socket, mode 0600 (root only); its directory is created 0700.
  socket = "/run/berth/berth.sock"

  # Optionally also over TCP. Every TCP request must then carry
  # "Authorization: Bearer <token>"; the agent refuses to start a TCP listener
  # without a token (at least 16 characters). token_file wins over token.
  # /metrics is served there too: examples/prometheus/prometheus.yml scrapes it
  # with the token from the same file.
  # tcp_address = "127.0.0.1:4646"
  # token       = "change-me-to-a-long-random-string"
  # token_file  = "/etc/berth/token"
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

  # exec: what cap_add may ask for (Nomad's allow_caps default). A root task gets
  # these less cap_drop; a task of another user (exec's default is nobody) gets
  # only what cap_add names.
  allow_caps = ["audit_write", "chown", "dac_override", "fowner", "fsetid", "kill", "mknod",
    "net_bind_service", "setfcap", "setgid", "setpcap", "setuid", "sys_chroot"]

  # exec tasks get PID and IPC namespaces of their own; these let a task ask for
  # pid_mode / ipc_mode = "host".
  allow_host_pid_mode = false
  allow_host_ipc_mode = false
}
