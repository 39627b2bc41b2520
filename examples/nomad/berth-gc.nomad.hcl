# The periodic variant of berth-janitor.nomad.hcl: a sysbatch job that runs
# `berth gc --nomad` once on every client every 10 minutes. Each run asks the
# local Nomad client agent which allocations are live and reclaims what Nomad
# left of the others (terminal ones at once, ones Nomad no longer knows once
# older than the grace period); it exits 1, and touches nothing, when the
# agent does not answer. Its output (JSON) is in the allocation's logs:
#
#   nomad job run examples/nomad/berth-gc.nomad.hcl
#   nomad alloc logs -job berth-gc

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
  description = "berth's data dir for the runs (its lock files; no workload state)"
  type        = string
  default     = "/var/lib/berth-janitor"
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

job "berth-gc" {
  type     = "sysbatch"
  priority = 80

  periodic {
    crons            = ["*/10 * * * *"]
    prohibit_overlap = true
  }

  group "gc" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    task "berth" {
      driver = "raw_exec"

      config {
        command = var.berth
        args = [
          "gc", "--nomad", "--json",
          "--data-dir", var.data_dir,
          "--lock-dir", "${var.data_dir}/lock",
          "--cni-path", var.cni_path,
          "--nomad-address", var.nomad_addr,
          "--nomad-data-dir", var.nomad_data_dir,
          "--nomad-grace-period", var.grace_period,
        ]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
