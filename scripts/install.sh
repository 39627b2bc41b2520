#!/usr/bin/env bash
# Builds berth from this checkout and installs it, as scripts/setup.sh does:
#
#   $PREFIX/bin/berth                                  the binary, version and commit stamped in
#   $PREFIX/bin/berth-supervisor                       the per-task supervisor of raw_exec and exec
#   $PREFIX/bin/berth-fetch                            the sandboxed artifact fetcher
#   /usr/share/bash-completion/completions/berth       bash completion (bash-completion loads it)
#   /usr/share/zsh/vendor-completions/_berth           zsh completion (Debian's zsh fpath)
#   /etc/systemd/system/berth.service                  the unit (installed, not enabled)
#   /etc/berth/berth.hcl                               the agent configuration the unit reads,
#                                                      only if none exists (never overwritten)
#
# Every path is under $DESTDIR (default: empty, the real root) so that a test
# or a packager can install into a scratch directory. PREFIX defaults to
# /usr/local. Idempotent: berth is rebuilt every time (the go build cache
# makes that a few seconds), and a file is replaced only when it changed.
#
# The version is `git describe --tags --always --dirty` in a git checkout,
# else the first line of the file VERSION at the top of the tree, else
# "unknown" (with a warning); the commit is `git rev-parse HEAD` (with -dirty
# when tracked files changed), else "unknown". BERTH_VERSION and
# BERTH_COMMIT override both.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr/local}

log() { printf 'install: %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go is required to build berth (https://go.dev/doc/install)"; exit 1; }

version=${BERTH_VERSION:-}
commit=${BERTH_COMMIT:-}
if [ -e "$root/.git" ] && ! git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	# e.g. "dubious ownership" when the checkout belongs to another user.
	log "$root has a .git but git cannot read it: $(git -C "$root" rev-parse 2>&1 | head -n1)"
fi
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	[ -n "$version" ] || version=$(git -C "$root" describe --tags --always --dirty)
	if [ -z "$commit" ]; then
		commit=$(git -C "$root" rev-parse HEAD)
		# The same notion of dirty as describe --dirty: tracked files only.
		git -C "$root" diff --quiet HEAD -- 2>/dev/null || commit="$commit-dirty"
	fi
elif [ -z "$version" ] && [ -s "$root/VERSION" ]; then
	version=$(head -n1 "$root/VERSION")
fi
if [ -z "$version" ]; then
	log "warning: cannot tell berth's version: $root is not a git checkout and has no VERSION file (set BERTH_VERSION); stamping \"unknown\""
	version=unknown
fi
commit=${commit:-unknown}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# put SRC DST MODE: install SRC as DST unless DST already has that content.
put() {
	local src=$1 dst=$2 mode=$3
	if [ -f "$dst" ] && cmp -s "$src" "$dst"; then
		chmod "$mode" "$dst"
		return
	fi
	log "installing $dst"
	install -D -m "$mode" "$src" "$dst"
}

pkg=github.com/berth/berth/cli
(cd "$root" && go build -ldflags "-X $pkg.Version=$version -X $pkg.Commit=$commit" -o "$tmp/berth" ./cmd/berth)
put "$tmp/berth" "$DESTDIR$PREFIX/bin/berth" 0755
# The raw_exec/exec drivers' per-task supervisor: berth finds it beside itself.
(cd "$root" && go build -trimpath -o "$tmp/berth-supervisor" ./cmd/berth-supervisor)
put "$tmp/berth-supervisor" "$DESTDIR$PREFIX/bin/berth-supervisor" 0755
# The artifact fetcher, a binary of its own so that the supervisor, resident
# once per task, links no HTTP, TLS or archive code; found the same way.
(cd "$root" && go build -trimpath -o "$tmp/berth-fetch" ./cmd/berth-fetch)
put "$tmp/berth-fetch" "$DESTDIR$PREFIX/bin/berth-fetch" 0755

"$tmp/berth" completion bash >"$tmp/berth.bash"
"$tmp/berth" completion zsh >"$tmp/_berth"
put "$tmp/berth.bash" "$DESTDIR/usr/share/bash-completion/completions/berth" 0644
put "$tmp/_berth" "$DESTDIR/usr/share/zsh/vendor-completions/_berth" 0644

# The unit runs $PREFIX/bin/berth: rewrite its path when PREFIX is not the default.
sed "s|/usr/local/bin/berth|$PREFIX/bin/berth|g" "$root/examples/agent/berth.service" >"$tmp/berth.service"
put "$tmp/berth.service" "$DESTDIR/etc/systemd/system/berth.service" 0644
if [ ! -e "$DESTDIR/etc/berth/berth.hcl" ]; then
	log "installing $DESTDIR/etc/berth/berth.hcl"
	install -D -m 0644 "$root/examples/agent/berth.hcl" "$DESTDIR/etc/berth/berth.hcl"
fi
# systemd, when it runs, learns of a new or changed unit only on a reload.
# The unit is not enabled: `systemctl enable --now berth` is the operator's call.
if [ -z "$DESTDIR" ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload || log "systemctl daemon-reload failed; run it before systemctl start berth"
fi

log "berth $version (commit $commit) in $DESTDIR$PREFIX/bin"
