#!/usr/bin/env bash
# Makes the Docker Engine berth's docker driver needs answer on
# /var/run/docker.sock, with the two local images in it:
#
#   - dockerd (Debian's docker.io) is started in the background when no
#     daemon answers, with its own log and pidfile (this machine has no
#     init system to run it; where systemd runs, its docker.service is used
#     instead, with /etc/docker/daemon.json written when there is none).
#     Its settings, in $DOCKERD_CONF (--config-file), keep it off the
#     host's firewall and network:
#       --iptables=false --ip6tables=false  dockerd would otherwise set the
#           iptables FORWARD policy to DROP and add its DOCKER* chains,
#           which breaks berth's CNI networks and its host leak checks;
#       --bridge=none  no docker0: berth gives containers their networks
#           through CNI (a pause container per allocation), so Docker's
#           own bridge would only be an unused interface and subnet;
#       --ip-forward=false --userland-proxy=false  no sysctl changes and
#           no docker-proxy processes: ports are CNI's portmap;
#       --live-restore  containers outlive a restart of dockerd, as
#           berth's tasks outlive one of berth.
#   - localhost/busybox:latest, the podman image (build-busybox.sh), is
#     loaded into Docker under the same name (podman save | docker load);
#   - localhost/berth-pause:latest, the pause image of group networks: a
#     static busybox that enters the allocation's namespace and sleeps.
#
# Idempotent and quick when all is there. Run as root.
#
# Environment:
#   DOCKER_SOCK   the socket (default /var/run/docker.sock)
#   DOCKERD_LOG   dockerd's log (default /var/log/berth-dockerd.log)
#   DOCKERD_PID   dockerd's pidfile (default /run/berth-dockerd.pid)
#   DOCKERD_CONF  berth's dockerd settings (default /etc/berth/dockerd.json)
set -euo pipefail

DOCKER_SOCK="${DOCKER_SOCK:-/var/run/docker.sock}"
DOCKERD_LOG="${DOCKERD_LOG:-/var/log/berth-dockerd.log}"
DOCKERD_PID="${DOCKERD_PID:-/run/berth-dockerd.pid}"
DOCKERD_CONF="${DOCKERD_CONF:-/etc/berth/dockerd.json}"
IMAGE=localhost/busybox:latest
PAUSE=localhost/berth-pause:latest
# Debian's client (20.10), not a newer one earlier in PATH: it speaks the
# daemon's API version without negotiation warnings.
DOCKER=/usr/bin/docker
[ -x "$DOCKER" ] || DOCKER=docker

log() { printf 'docker-setup: %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
	log "must run as root"
	exit 1
fi
command -v dockerd >/dev/null || { log "dockerd is not installed (apt-get install docker.io)"; exit 1; }

d() { "$DOCKER" -H "unix://$DOCKER_SOCK" "$@"; }
answers() { [ -S "$DOCKER_SOCK" ] && d version --format '{{.Server.APIVersion}}' >/dev/null 2>&1; }

conf='{
	"iptables": false,
	"ip6tables": false,
	"bridge": "none",
	"ip-forward": false,
	"ip-masq": false,
	"userland-proxy": false,
	"live-restore": true
}'
mkdir -p "$(dirname "$DOCKERD_CONF")"
[ "$(cat "$DOCKERD_CONF" 2>/dev/null)" = "$conf" ] || printf '%s\n' "$conf" >"$DOCKERD_CONF"

if ! answers; then
	if [ -d /run/systemd/system ] && systemctl cat docker.service >/dev/null 2>&1; then
		if [ ! -e /etc/docker/daemon.json ]; then
			mkdir -p /etc/docker
			install -m 0644 "$DOCKERD_CONF" /etc/docker/daemon.json
		elif ! grep -q '"iptables": *false' /etc/docker/daemon.json; then
			log "WARNING: /etc/docker/daemon.json does not set \"iptables\": false: dockerd will set the FORWARD policy to DROP (see $DOCKERD_CONF)"
		fi
		log "starting docker.service"
		systemctl start docker.service
	else
		log "starting dockerd (settings $DOCKERD_CONF, log $DOCKERD_LOG, pidfile $DOCKERD_PID)"
		# setsid: dockerd is nobody's child, a test run or a shell ending
		# does not take it down. --config-file: an operator's
		# /etc/docker/daemon.json is not read (it may set what berth's
		# settings must not).
		# Only stdin, stdout and stderr (redirected) go to dockerd: a
		# descriptor the caller holds (the test suite's host lock, a CI
		# runner's pipe) would otherwise stay open as long as dockerd runs.
		(
			for fd in /proc/self/fd/*; do
				fd=${fd##*/}
				if [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
			done
			exec setsid dockerd \
				--config-file "$DOCKERD_CONF" \
				--host "unix://$DOCKER_SOCK" \
				--pidfile "$DOCKERD_PID" \
				</dev/null >>"$DOCKERD_LOG" 2>&1
		) &
	fi
	for _ in $(seq 1 120); do
		answers && break
		sleep 0.5
	done
	if ! answers; then
		log "dockerd does not answer on $DOCKER_SOCK after 60s; its log: $DOCKERD_LOG"
		tail -n 20 "$DOCKERD_LOG" >&2 || true
		exit 1
	fi
fi

if ! d image inspect "$IMAGE" >/dev/null 2>&1; then
	here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	podman image exists "$IMAGE" || "$here/build-busybox.sh" >&2
	log "loading $IMAGE into Docker"
	podman save --format docker-archive "$IMAGE" | d load -q >&2
fi

if ! d image inspect "$PAUSE" >/dev/null 2>&1; then
	log "building $PAUSE"
	rootfs="$(mktemp -d /tmp/berth-pause-rootfs.XXXXXX)"
	trap 'rm -rf -- "$rootfs"' EXIT
	mkdir -p "$rootfs"/{bin,proc,sys,dev,etc}
	install -m 0755 /bin/busybox "$rootfs/bin/busybox"
	ln -s busybox "$rootfs/bin/sh"
	# The driver starts it as: nsenter --net=/berth/netns busybox sleep inf
	# (see task/driver/docker pause.go); with no namespace to enter it
	# just sleeps.
	tar -C "$rootfs" -c . | d import \
		--change 'ENTRYPOINT ["/bin/busybox"]' --change 'CMD ["sleep", "2147483647"]' \
		--change 'LABEL berth.pause=image' - "$PAUSE" >/dev/null
fi
log "ok: $(d version --format 'server {{.Server.Version}}, API {{.Server.APIVersion}}'), $(d info --format 'storage {{.Driver}}')"
