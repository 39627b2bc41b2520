#!/usr/bin/env bash
# Runs berth's whole test suite as CI does: installs what the tests need,
# then runs every package's tests, as root, against real namespaces, the
# real CNI plugins and real podman.
#
# Packages run one at a time (-p 1): each test binary checks that the host
# is exactly as it found it (namespaces, veths, leases, iptables chains,
# CNI cache, containers), which only means something if no other test
# binary is changing the host at the same time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
# staticcheck first (setup installed the pinned version): a finding fails
# the run. Only on the whole suite, as the fuzzing below.
if [ $# -eq 0 ]; then
	"$(go env GOPATH)/bin/staticcheck" ./...
fi
go test -race -p 1 -count=1 -timeout 60m "$@" ./...
# The parsers that read what a request or a job file sends, fuzzed for a
# bounded number of inputs (a crash there would take down a root agent).
# A count, not a duration: Go 1.26's fuzz coordinator can fail a run whose
# -fuzztime duration ends while a worker is mid-input ("context deadline
# exceeded", go.dev/issue/75804, fixed in Go 1.27). Only on the whole
# suite: a run of chosen packages ("$@") skips it.
if [ $# -eq 0 ]; then
	FUZZTIME=${BERTH_FUZZTIME:-50000x}
	go test -run XXX -fuzz '^FuzzParse$' -fuzztime "$FUZZTIME" ./job/jobspec
	go test -run XXX -fuzz '^FuzzSubmitBody$' -fuzztime "$FUZZTIME" ./node/agent
fi
