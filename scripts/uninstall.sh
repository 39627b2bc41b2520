#!/usr/bin/env bash
# Removes what scripts/setup.sh installed for berth, and says what it kept:
#
#   removed: $PREFIX/bin/berth, berth-supervisor and berth-fetch, the bash and zsh completions, the systemd unit
#            (disabled first when systemd runs), /etc/berth/berth.hcl when it is
#            still the shipped example;
#   removed only when berth's store is gone (no attachment can need them
#   for its CNI DEL any more): the example CNI networks in /etc/cni/net.d
#            that are still as shipped, and the CNI reference plugins setup
#            built into /opt/berth/cni/bin;
#   kept:    every configuration an operator edited, the data dir
#            (/var/lib/berth), libcni's cache, the Debian packages and the
#            local busybox image (other software may use them).
#
# Refuses to run while an agent answers on its socket: stop it first.
# DESTDIR, PREFIX, BERTH_CNI_BIN, CNI_CONF_DIR and BERTH_DATA_DIR are as for
# scripts/setup.sh and scripts/install.sh. Idempotent.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr/local}
BERTH_CNI_BIN=${BERTH_CNI_BIN:-/opt/berth/cni/bin}
CNI_CONF_DIR=${CNI_CONF_DIR:-/etc/cni/net.d}
BERTH_DATA_DIR=${BERTH_DATA_DIR:-/var/lib/berth}

log() { printf 'uninstall: %s\n' "$*" >&2; }
kept=()
keep() { kept+=("$1"); }

bin="$DESTDIR$PREFIX/bin/berth"
unit="$DESTDIR/etc/systemd/system/berth.service"
systemd=
[ -z "$DESTDIR" ] && [ -d /run/systemd/system ] && systemd=1

# A running agent would lose its binary and unit under it.
if [ -n "$systemd" ] && systemctl is-active --quiet berth 2>/dev/null; then
	log "the berth service is running: systemctl stop berth, then run this again"
	exit 1
fi
if [ -x "$bin" ] && "$bin" job status >/dev/null 2>&1; then
	log "a berth agent answers on ${BERTH_ADDR:-its default socket}: stop it (SIGTERM drains it), then run this again"
	exit 1
fi

rm_file() {
	if [ -e "$1" ] || [ -L "$1" ]; then
		log "removing $1"
		rm -f "$1"
	fi
}

# rm_if_shipped FILE EXAMPLE: remove FILE if it is still EXAMPLE, else keep it.
rm_if_shipped() {
	local f=$1 example=$2
	[ -e "$f" ] || return 0
	if cmp -s "$f" "$example"; then
		rm_file "$f"
	else
		keep "$f (edited)"
	fi
}

if [ -e "$unit" ]; then
	if [ -n "$systemd" ]; then
		systemctl disable berth 2>/dev/null || true
	fi
	rm_file "$unit"
	[ -n "$systemd" ] && systemctl daemon-reload
fi
rm_file "$bin"
rm_file "$DESTDIR$PREFIX/bin/berth-supervisor"
rm_file "$DESTDIR$PREFIX/bin/berth-fetch"
rm_file "$DESTDIR/usr/share/bash-completion/completions/berth"
rm_file "$DESTDIR/usr/share/zsh/vendor-completions/_berth"
rm_if_shipped "$DESTDIR/etc/berth/berth.hcl" "$root/examples/agent/berth.hcl"
rmdir "$DESTDIR/etc/berth" 2>/dev/null || true

store="$DESTDIR$BERTH_DATA_DIR/berth.db"
if [ -e "$store" ]; then
	# Attachments recorded there are torn down (CNI DEL) with these
	# networks' configurations and plugins: removing them would make those
	# teardowns impossible.
	for f in "$root"/examples/cni/*.conflist; do
		[ -e "$DESTDIR$CNI_CONF_DIR/$(basename "$f")" ] && keep "$DESTDIR$CNI_CONF_DIR/$(basename "$f") (berth's store still exists)"
	done
	[ -e "$DESTDIR$BERTH_CNI_BIN" ] && keep "$DESTDIR$BERTH_CNI_BIN (berth's store still exists)"
else
	for f in "$root"/examples/cni/*.conflist; do
		rm_if_shipped "$DESTDIR$CNI_CONF_DIR/$(basename "$f")" "$f"
	done
	if [ -e "$DESTDIR$BERTH_CNI_BIN/.berth-cni-version" ]; then
		log "removing the CNI reference plugins in $DESTDIR$BERTH_CNI_BIN"
		rm -rf "$DESTDIR$BERTH_CNI_BIN"
		rmdir "$(dirname "$DESTDIR$BERTH_CNI_BIN")" 2>/dev/null || true
	fi
fi
[ -e "$DESTDIR$BERTH_DATA_DIR" ] && keep "$DESTDIR$BERTH_DATA_DIR (berth's data dir: run \`berth gc\` before uninstalling, then remove it yourself)"

log "removed berth"
if [ ${#kept[@]} -gt 0 ]; then
	log "kept:"
	for k in "${kept[@]}"; do log "  $k"; done
fi
log "kept the Debian packages (podman, CNI plugins, prometheus, ...) and the image localhost/busybox:latest: other software may use them"
