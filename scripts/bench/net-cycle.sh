#!/usr/bin/env bash
# One network's life, berth against the bare plugins: a `berth net up` +
# `berth net down` cycle, and the same plugins (bridge + host-local +
# firewall + loopback) driven by `ip netns add`, `cnitool add`, `cnitool
# del`, `ip netns del`. Runs the two alternately (A B A B ..., so that a
# machine whose speed drifts slows both alike), PAIRS times (default 12),
# and prints each one's median wall time per cycle and the median of the
# per-pair ratios A/B. berth's CPU time goes in too: every call is a whole
# berth process (package init, flags, store, locks).
#
#   bash scripts/bench/net-cycle.sh        # as root, after scripts/setup.sh
#
# BERTH (default: berth built from this checkout) and CNITOOL (default:
# cnitool on PATH, else `go install`ed at the libcni version of go.mod into
# a scratch dir) name the binaries.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
PAIRS=${PAIRS:-12}
SUBNET=10.199.49.0/24
NET=btbench-cycle
BRIDGE=btbrcycle0
PLUGINS=${BERTH_CNI_BIN:-/opt/berth/cni/bin}

[ "$(id -u)" -eq 0 ] || { echo "must run as root" >&2; exit 1; }
work=$(mktemp -d /tmp/btbench-cycle.XXXXXX)
cleanup() {
	set +e
	ip netns del btbench-cycle-b 2>/dev/null
	ip link del "$BRIDGE" 2>/dev/null
	rm -rf "/var/lib/cni/networks/$NET" "$work"
}
trap cleanup EXIT

BERTH=${BERTH:-}
if [ -z "$BERTH" ]; then
	(cd "$root" && go build -o "$work/berth" ./cmd/berth)
	BERTH=$work/berth
fi
CNITOOL=${CNITOOL:-$(command -v cnitool || true)}
if [ -z "$CNITOOL" ]; then
	v=$(cd "$root" && go list -m -f '{{.Version}}' github.com/containernetworking/cni)
	(cd "$work" && GOFLAGS= GOBIN="$work" go install "github.com/containernetworking/cni/cnitool@$v")
	CNITOOL=$work/cnitool
fi

mkdir -p "$work/cni" "$work/data" "$work/lock"
cat >"$work/cni/$NET.conflist" <<EOF
{"cniVersion": "1.1.0", "name": "$NET", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$SUBNET"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "firewall", "backend": "iptables"},
  {"type": "loopback"}]}
EOF
flags=(--data-dir "$work/data" --cni-config-dir "$work/cni" --lock-dir "$work/lock" --cni-path "$PLUGINS")
berth_cycle() {
	"$BERTH" "${flags[@]}" net up btbench-cycle-a --network "$NET" >/dev/null
	"$BERTH" "${flags[@]}" net down btbench-cycle-a >/dev/null
}
plugins_cycle() {
	ip netns add btbench-cycle-b
	CNI_PATH=$PLUGINS NETCONFPATH=$work/cni "$CNITOOL" add "$NET" /run/netns/btbench-cycle-b >/dev/null
	CNI_PATH=$PLUGINS NETCONFPATH=$work/cni "$CNITOOL" del "$NET" /run/netns/btbench-cycle-b >/dev/null
	ip netns del btbench-cycle-b
}
ns() { date +%s%N; }

berth_cycle # warm-up: page cache, the bridge, the shared chains
plugins_cycle
: >"$work/times"
for _ in $(seq "$PAIRS"); do
	t0=$(ns); berth_cycle; t1=$(ns); plugins_cycle; t2=$(ns)
	echo "$((t1 - t0)) $((t2 - t1))" >>"$work/times"
done
median() { sort -g | awk '{v[NR]=$1} END{print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
a=$(awk '{print $1/1e6}' "$work/times" | median)
b=$(awk '{print $2/1e6}' "$work/times" | median)
r=$(awk '{print $1/$2}' "$work/times" | median)
printf 'berth net up+down:            %8.1f ms (median of %d)\n' "$a" "$PAIRS"
printf 'ip netns + cnitool add/del:   %8.1f ms\n' "$b"
printf 'ratio (median of pairs):      %8.3f\n' "$r"
