#!/usr/bin/env bash
# Nomad's own CLI against a berth agent: a Nomad user's commands, unchanged,
# with NOMAD_ADDR and NOMAD_TOKEN pointing at `berth agent --nomad-api`.
#
#   berth agent --nomad-api 127.0.0.1:4646 --token-file /etc/berth/token &
#   NOMAD_ADDR=http://127.0.0.1:4646 NOMAD_TOKEN=$(cat /etc/berth/token) bash examples/nomad-cli.sh
#
# Runs the seed job (periodic, podman, cni/private), a service job with a
# check, and a batch job whose logs it follows; execs into the service,
# round-trips a Nomad Variable, then stops and purges all three. Each
# command must exit 0; the script stops at the first that does not.
# BERTH_EXAMPLE_JOBS overrides the job files' dir (the tests point it at
# copies on their own network).
set -euo pipefail
: "${NOMAD_ADDR:?set NOMAD_ADDR to the Nomad API of a berth agent (berth agent --nomad-api)}"
jobs=${BERTH_EXAMPLE_JOBS:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/jobs}
nomad=${NOMAD:-nomad}

step() { printf '\n==> %s\n' "$*"; "$@"; }

cleanup() {
	for j in cni-debug web countdown; do
		"$nomad" job stop -purge -yes "$j" >/dev/null 2>&1 || true
	done
}
trap cleanup EXIT

step "$nomad" job run "$jobs/seed-podman-every-second.nomad.hcl"
step "$nomad" job run "$jobs/web-service.nomad.hcl"
step "$nomad" job run "$jobs/countdown.nomad.hcl"
step "$nomad" job status
step "$nomad" job status web

# The seed job's children: one per second.
sleep 3
step "$nomad" job status cni-debug

# The first allocation of job $1 whose client status is $2 (any with "").
alloc() {
	local tmpl='{{range .}}{{.ID}} {{.ClientStatus}}{{"\n"}}{{end}}'
	"$nomad" job allocs -t "$tmpl" "$1" | awk -v s="$2" 's == "" || $2 == s { print $1; exit }'
}

count=$(alloc countdown complete)
[ -n "$count" ] || count=$(alloc countdown "")
step "$nomad" alloc logs -stdout -f "$count" count

web=$(alloc web running)
step "$nomad" alloc status "$web"
step "$nomad" alloc exec -task httpd "$web" /bin/sh -c 'wget -qO- http://127.0.0.1:8080/'

step "$nomad" var put -force nomad/jobs/web greeting=hello
step "$nomad" var get nomad/jobs/web

step "$nomad" job stop -purge -yes cni-debug
step "$nomad" job stop -purge -yes web
step "$nomad" job stop -purge -yes countdown
trap - EXIT
printf '\n==> every command exited 0\n'
