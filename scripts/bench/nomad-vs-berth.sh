#!/usr/bin/env bash
# Side by side: the same job file (40 allocations of `sh -c "exit 0"`, raw_exec, in a
# cni/<name> network) and the same conflist (bridge + host-local + portmap + firewall +
# loopback) on real Nomad v1.6.5 and on berth, and the plugins' floor: 40 cnitool cycles
# of the same chain, 4 at a time. Each figure is the wall time from submit until every
# allocation is terminal and its veth is gone. Prints the medians of REPEAT rounds
# (default 3), run alternately.
#
#   bash scripts/bench/nomad-vs-berth.sh            # as root, after scripts/setup.sh
#
# Nomad runs as a private agent: 127.0.0.1 only, cloud fingerprinters denied, its own
# data dir, ports and CNI config dir. Everything it and berth leave (Nomad leaks its
# namespace mounts by design) is removed at the end.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
REPEAT=${REPEAT:-3}
COUNT=${COUNT:-40}
SUBNET=10.199.106.0/24
NET=btbench-nomad
BRIDGE=btbrnomad0
PLUGINS=${BERTH_CNI_BIN:-/opt/berth/cni/bin}
PORT_BASE=${PORT_BASE:-24646}

[ "$(id -u)" -eq 0 ] || { echo "must run as root" >&2; exit 1; }
if ! command -v nomad >/dev/null; then
	nomad_tools=$root/../shared/tools/nomad
	[ -x "$nomad_tools/install.sh" ] || { echo "nomad not installed and $nomad_tools missing" >&2; exit 1; }
	bash "$nomad_tools/install.sh"
fi

work=$(mktemp -d /tmp/btbench-nomad.XXXXXX)
nomad_pid=""
cleanup() {
	set +e
	if [ -n "$nomad_pid" ]; then
		NOMAD_ADDR=http://127.0.0.1:$PORT_BASE nomad job stop -purge btbench >/dev/null 2>&1
		kill -INT "$nomad_pid" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$nomad_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$nomad_pid" 2>/dev/null
		wait "$nomad_pid" 2>/dev/null
	fi
	# A stopped Nomad client leaves its allocations' mounts under its data dir, and
	# (the seed's bug) namespace mounts in /run/netns: unmount deepest first.
	awk -v d="$work/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m"; done
	while read -r id; do
		if [ -e "/run/netns/$id" ]; then umount -l "/run/netns/$id" 2>/dev/null; rm -f "/run/netns/$id"; fi
	done < <(cat "$work/nomad-allocs" 2>/dev/null)
	"$work/berth" gc --data-dir "$work/berth-data" --cni-config-dir "$work/cni" --cni-path "$PLUGINS" \
		--foreign-network "$NET" >/dev/null 2>&1
	ip link del "$BRIDGE" 2>/dev/null
	rm -rf "/var/lib/cni/networks/$NET"
	rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/cni" "$work/nomad"
cat >"$work/cni/$NET.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "$NET", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$SUBNET"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true},
  {"type": "firewall", "backend": "iptables"},
  {"type": "loopback"}]}
EOF
cat >"$work/job.nomad.hcl" <<EOF
job "btbench" {
  datacenters = ["dc1"]
  type        = "batch"
  group "g" {
    count = $COUNT
    network { mode = "cni/$NET" }
    restart { attempts = 0 }
    reschedule { attempts = 0 }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "exit 0"]
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
EOF
cat >"$work/nomad.hcl" <<EOF
data_dir  = "$work/nomad"
bind_addr = "127.0.0.1"
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
ports {
  http = $PORT_BASE
  rpc  = $((PORT_BASE + 1))
  serf = $((PORT_BASE + 2))
}
server {
  enabled          = true
  bootstrap_expect = 1
}
client {
  enabled        = true
  cni_path       = "$PLUGINS"
  cni_config_dir = "$work/cni"
  options = {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
consul {
  auto_advertise   = false
  server_auto_join = false
  client_auto_join = false
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
EOF
(cd "$root" && go build -o "$work/berth" ./cmd/berth && go build -o "$work/cnitool" github.com/containernetworking/cni/cnitool)

export NOMAD_ADDR=http://127.0.0.1:$PORT_BASE
nomad agent -config "$work/nomad.hcl" >"$work/nomad.log" 2>&1 &
nomad_pid=$!
for _ in $(seq 300); do
	if curl -sf "$NOMAD_ADDR/v1/nodes" | grep -q '"Status":"ready"'; then break; fi
	sleep 0.2
done
curl -sf "$NOMAD_ADDR/v1/nodes" | grep -q '"Status":"ready"' || { echo "nomad client not ready; log:"; tail -20 "$work/nomad.log"; exit 1; }

now_ms() { date +%s%3N; }
veths() { ip -o link show master "$BRIDGE" 2>/dev/null | wc -l; }

run_nomad() {
	local start end terminal
	start=$(now_ms)
	nomad job run -detach "$work/job.nomad.hcl" >/dev/null
	while :; do
		terminal=$(curl -sf "$NOMAD_ADDR/v1/job/btbench/allocations" | grep -o '"ClientStatus":"\(complete\|failed\|lost\)"' | wc -l)
		if [ "$terminal" -ge "$COUNT" ] && [ "$(veths)" -eq 0 ]; then break; fi
		sleep 0.05
	done
	end=$(now_ms)
	# Kept in a file: this runs in a subshell.
	curl -sf "$NOMAD_ADDR/v1/job/btbench/allocations" | grep -o '"ID":"[0-9a-f-]\{36\}"' | cut -d'"' -f4 | sort -u >>"$work/nomad-allocs"
	nomad job stop -purge btbench >/dev/null 2>&1 || true
	curl -sf -X PUT "$NOMAD_ADDR/v1/system/gc" >/dev/null || true
	echo $((end - start))
}

run_berth() {
	local start end
	start=$(now_ms)
	"$work/berth" run "$work/job.nomad.hcl" --data-dir "$work/berth-data" --cni-config-dir "$work/cni" \
		--cni-path "$PLUGINS" --lock-dir "$work/lock" >"$work/berth.out" 2>&1 || { cat "$work/berth.out" >&2; exit 1; }
	while [ "$(veths)" -ne 0 ]; do sleep 0.01; done
	end=$(now_ms)
	echo $((end - start))
}

cnitool_cycle() {
	local id=btbench-c$1
	ip netns add "$id"
	NETCONFPATH=$work/cni CNI_PATH=$PLUGINS "$work/cnitool" add "$NET" "/run/netns/$id" >/dev/null
	NETCONFPATH=$work/cni CNI_PATH=$PLUGINS "$work/cnitool" del "$NET" "/run/netns/$id"
	ip netns del "$id"
}
export -f cnitool_cycle
export work NET PLUGINS

run_floor() {
	local start end
	start=$(now_ms)
	seq "$COUNT" | xargs -P 4 -I{} bash -c 'cnitool_cycle {}'
	end=$(now_ms)
	echo $((end - start))
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# One round of each first: the bridge and shared chains are made once and stay.
run_floor >/dev/null
nomad_t=() berth_t=() floor_t=()
for r in $(seq "$REPEAT"); do
	nomad_t+=("$(run_nomad)")
	berth_t+=("$(run_berth)")
	floor_t+=("$(run_floor)")
	echo "round $r: nomad ${nomad_t[-1]} ms, berth ${berth_t[-1]} ms, cnitool floor ${floor_t[-1]} ms" >&2
done
n=$(printf '%s\n' "${nomad_t[@]}" | median)
b=$(printf '%s\n' "${berth_t[@]}" | median)
f=$(printf '%s\n' "${floor_t[@]}" | median)
printf 'median of %d rounds, %d allocations each (submit until all terminal and veths gone):\n' "$REPEAT" "$COUNT"
printf '  Nomad v1.6.5        %6d ms\n' "$n"
printf '  berth               %6d ms\n' "$b"
printf '  cnitool floor (x4)  %6d ms\n' "$f"
awk -v b="$b" -v f="$f" -v n="$n" 'BEGIN {printf "  berth / floor %.2fx, Nomad / berth %.2fx\n", b / f, n / b}'
leaked=0 total=0
while read -r id; do
	total=$((total + 1))
	if [ -e "/run/netns/$id" ]; then leaked=$((leaked + 1)); fi
done < "$work/nomad-allocs"
printf '  Nomad leaked %d of %d namespace mounts (removed now)\n' "$leaked" "$total"
