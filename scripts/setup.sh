#!/usr/bin/env bash
# Installs what berth and its tests need on a Debian 12 host, as root.
# Idempotent: every step checks first and does nothing when already done.
#
#   - Debian packages: iproute2, iptables, Debian's CNI plugins (many users
#     run those), podman + runc + conmon, busybox-static (the local image);
#   - the CNI reference plugins v1.10.0, built with `go install` into
#     /opt/berth/cni/bin (Debian's 1.1.1 portmap fails CHECK on every healthy
#     attachment with port mappings: containernetworking/plugins#819);
#   - example network configurations into /etc/cni/net.d;
#   - the local image localhost/busybox:latest (no registry is reachable);
#   - Debian's chromium, the headless browser the status page's tests
#     drive (package ui; on CI a missing chromium fails them);
#   - Debian's Docker Engine (docker.io, 20.10) for the docker driver,
#     installed without starting its service, then dockerd started by
#     scripts/image/docker-setup.sh when none answers, off the host's
#     firewall (no iptables rules, no FORWARD DROP, no docker0: berth's
#     containers get their networks through CNI), with localhost/busybox:latest
#     and the pause image localhost/berth-pause:latest loaded;
#   - Debian's prometheus (promtool, and the server the metrics tests start
#     on a port of their own), with its system service left stopped and
#     disabled;
#   - Nomad v1.6.5 (MPL-2.0) for the Nomad tests, from ../shared/tools/nomad
#     next to the checkout when that is there (its install.sh verifies the
#     checksum and does nothing when the binary is in place);
#   - staticcheck (STATICCHECK_VERSION, with `go install` from the Go module
#     proxy into $(go env GOPATH)/bin), which scripts/test.sh runs;
#   - berth itself, berth-supervisor and berth-fetch, built from this checkout (scripts/install.sh): the
#     binary in /usr/local/bin, bash and zsh completions, the systemd unit
#     (not enabled) and /etc/berth/berth.hcl. scripts/uninstall.sh removes them.
set -euo pipefail

CNI_VERSION=v1.10.0
# staticcheck 2026.2.2: the first release that knows Go 1.26.
STATICCHECK_VERSION=v0.8.2
CNI_PLUGINS=(main/bridge ipam/host-local meta/portmap meta/firewall main/loopback meta/tuning ipam/static)
BERTH_CNI_BIN=${BERTH_CNI_BIN:-/opt/berth/cni/bin}
CNI_CONF_DIR=${CNI_CONF_DIR:-/etc/cni/net.d}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)

log() { printf 'setup: %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
	log "must run as root (berth creates network namespaces and iptables rules)"
	exit 1
fi

# 1. Debian packages.
pkgs=(iproute2 iptables containernetworking-plugins podman runc conmon busybox-static procps tzdata bash-completion chromium)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
updated=
apt_update() {
	[ -n "$updated" ] || apt-get update -q >&2
	updated=1
}
missing=()
for p in "${pkgs[@]}"; do
	installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "installing Debian packages: ${missing[*]}"
	apt_update
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
fi

# Prometheus. Its maintainer scripts enable the system service and start it
# (invoke-rc.d, or systemctl where systemd runs): berth's tests run their
# own server, and a node needs no second one scraping nothing. A
# policy-rc.d that refuses every start (exit 101, which both invoke-rc.d
# and deb-systemd-invoke obey) is in place only while the package installs,
# unless the host has its own; the service is then disabled for boot, and
# stopped should a host policy have let it start. Only done when setup
# installs the package: an operator's own prometheus is left alone.
# Recommends are skipped: they would add prometheus-node-exporter, another
# service.
if ! installed prometheus; then
	log "installing Debian's prometheus (its system service stays stopped and disabled)"
	apt_update
	(
		policy=/usr/sbin/policy-rc.d
		if [ ! -e "$policy" ]; then
			trap 'rm -f "$policy"' EXIT
			printf '#!/bin/sh\n# scripts/setup.sh: no service starts while it installs packages\nexit 101\n' >"$policy"
			chmod 0755 "$policy"
		fi
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >&2
	)
	deb-systemd-helper disable prometheus.service >/dev/null 2>&1 || true
	update-rc.d prometheus disable >/dev/null 2>&1 || true
	if [ -d /run/systemd/system ]; then
		systemctl stop prometheus.service >&2 || true
	elif [ -s /run/prometheus/prometheus.pid ]; then
		# The init script stops only the pid in its pidfile.
		/etc/init.d/prometheus stop >&2 || true
	fi
fi

# Docker Engine. As for prometheus, its maintainer scripts would start
# the service (invoke-rc.d docker start, or docker.service where systemd
# runs) with Docker's defaults, which set the iptables FORWARD policy to
# DROP and add chains: berth's CNI networks and leak checks break. So no
# service starts while it installs, the init script is not enabled at boot
# where no systemd runs, and docker-setup.sh starts dockerd with berth's
# settings (step 4).
if ! installed docker.io; then
	log "installing Debian's docker.io (its service is not started; docker-setup.sh starts dockerd)"
	apt_update
	(
		policy=/usr/sbin/policy-rc.d
		if [ ! -e "$policy" ]; then
			trap 'rm -f "$policy"' EXIT
			printf '#!/bin/sh\n# scripts/setup.sh: no service starts while it installs packages\nexit 101\n' >"$policy"
			chmod 0755 "$policy"
		fi
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >&2
	)
	if [ ! -d /run/systemd/system ]; then
		update-rc.d docker disable >/dev/null 2>&1 || true
	fi
fi

# 2. Reference CNI plugins, built from the Go module proxy.
stamp="$BERTH_CNI_BIN/.berth-cni-version"
if [ "$(cat "$stamp" 2>/dev/null)" != "$CNI_VERSION" ]; then
	command -v go >/dev/null || { log "go is required to build the CNI plugins ($CNI_VERSION)"; exit 1; }
	log "building CNI reference plugins $CNI_VERSION into $BERTH_CNI_BIN (about a minute on a cold cache)"
	mkdir -p "$BERTH_CNI_BIN"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	mods=()
	for p in "${CNI_PLUGINS[@]}"; do mods+=("github.com/containernetworking/plugins/plugins/$p@$CNI_VERSION"); done
	# GOFLAGS from the caller (e.g. -mod=vendor) must not apply to go install.
	(cd "$tmp" && GOFLAGS= GOBIN="$tmp/bin" CGO_ENABLED=0 go install "${mods[@]}")
	install -m 0755 "$tmp"/bin/* "$BERTH_CNI_BIN"/
	echo "$CNI_VERSION" >"$stamp"
fi

# 3. Example networks (never overwrite an operator's edited file).
mkdir -p "$CNI_CONF_DIR"
for f in "$root"/examples/cni/*.conflist; do
	[ -e "$f" ] || continue
	dst="$CNI_CONF_DIR/$(basename "$f")"
	if [ ! -e "$dst" ]; then
		log "installing example network $dst"
		install -m 0644 "$f" "$dst"
	fi
done

# 4. The local busybox image for the podman driver; dockerd, with that
# image and the pause image, for the docker driver.
if [ -x "$root/scripts/image/build-busybox.sh" ]; then
	"$root/scripts/image/build-busybox.sh" >&2
fi
bash "$root/scripts/image/docker-setup.sh"

# 5. Nomad for the Nomad tests (package nomad): the kept v1.6.5 build.
nomad_tools="$root/../shared/tools/nomad"
if [ -f "$nomad_tools/install.sh" ]; then
	bash "$nomad_tools/install.sh" /usr/local/bin/nomad >&2
elif ! command -v nomad >/dev/null; then
	log "Nomad not installed and $nomad_tools missing: the Nomad tests will skip (fail with CI=true)"
fi

# 6. staticcheck, the version pinned above (its -version prints it in
# parentheses: "staticcheck 2026.2.2 (0.8.2)").
staticcheck="$(go env GOPATH)/bin/staticcheck"
if ! "$staticcheck" -version 2>/dev/null | grep -qF "(${STATICCHECK_VERSION#v})"; then
	log "installing staticcheck $STATICCHECK_VERSION into $(dirname "$staticcheck")"
	(cd / && GOFLAGS= go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION")
fi

# 7. berth itself.
bash "$here/install.sh"

log "ok"
