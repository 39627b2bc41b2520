# berth's Nomad janitor: one allocation on every client (a system job) runs
# `berth agent` with a nomad block, which reclaims what Nomad leaves on its
# node: the namespace mounts Nomad 1.6 to 1.10.0 leak ("failed to unmount NS
# ... device or resource busy"), and the libcni cache entries, host-local
# leases and iptables rules a killed client leaves. It follows the node's
# allocation events and reclaims an allocation's leftovers seconds after the
# allocation is terminal, plus a full reconcile at start and every
# gc_interval. It never touches a pending or running allocation, nor a
# namespace a process lives in, and nothing at all while the Nomad agent
# does not answer.
#
#   nomad job run examples/nomad/berth-janitor.nomad.hcl
#   nomad job run -var berth=/opt/berth/bin/berth examples/nomad/berth-janitor.nomad.hcl
#
# berth must be installed on every client (scripts/install.sh puts it in
# /usr/local/bin), and raw_exec enabled (plugin "raw_exec" { config {
# enabled = true } }): the janitor unmounts namespaces and runs CNI plugins,
# as root, outside any namespace of its own. With ACLs on, give it a token
# allowed agent:read, node:read and read-job in every namespace, e.g. from a
# Nomad variable (see README.md, "Nomad clusters").

variable "berth" {
  description = "path of the berth binary on the clients"
  type        = string
  default     = "/usr/local/bin/berth"
}

variable "nomad_addr" {
  description = "the local Nomad client agent's HTTP address, as seen from the client itself"
  type        = string
  default     = "http://127.0.0.1:4646"
}

variable "data_dir" {
  description = "the janitor's own berth data dir (not the one of a berth that runs workloads)"
  type        = string
  default     = "/var/lib/berth-janitor"
}

variable "run_dir" {
  description = "where the janitor's API socket (and /metrics) and locks live"
  type        = string
  default     = "/run/berth-janitor"
}

variable "cni_path" {
  description = "CNI plugin dirs, colon-separated: Nomad's cni_path, for DELs of its attachments"
  type        = string
  default     = "/opt/cni/bin:/opt/berth/cni/bin:/usr/lib/cni"
}

variable "nomad_data_dir" {
  description = "the Nomad agent's data_dir on the clients: the janitor checks the client's identity (client/client-id, the process holding client/state.db) and its allocations (alloc/<id>) there"
  type        = string
  default     = "/opt/nomad/data"
}

variable "grace_period" {
  description = "leftovers of allocations Nomad no longer knows are reclaimed once older than this"
  type        = string
  default     = "1h"
}

variable "gc_interval" {
  description = "how often the full reconcile runs"
  type        = string
  default     = "5m"
}

job "berth-janitor" {
  type     = "system"
  priority = 80

  group "janitor" {
    # No network block: the janitor lives in the host's namespace.
    restart {
      attempts = 10
      interval = "5m"
      delay    = "10s"
      mode     = "delay"
    }

    task "berth" {
      driver = "raw_exec"

      config {
        command = var.berth
        args = [
          "agent",
          "--data-dir", var.data_dir,
          "--socket", "${var.run_dir}/berth.sock",
          "--lock-dir", "${var.run_dir}/lock",
          "--cni-path", var.cni_path,
          # Only Nomad's leftovers: the janitor runs no berth workloads and
          # must not take other runtimes' CNI state for berth's.
          "--gc-mode", "records",
          "--gc-interval", var.gc_interval,
          "--nomad-address", var.nomad_addr,
          "--nomad-data-dir", var.nomad_data_dir,
          "--nomad-grace-period", var.grace_period,
          "--log-format", "json",
        ]
      }

      # The agent drains on SIGINT (nothing of its own to stop here).
      kill_signal  = "SIGINT"
      kill_timeout = "30s"

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
