#!/usr/bin/env bash
# Builds localhost/busybox:latest for berth's podman driver from the static
# busybox of Debian's busybox-static package: this machine has no image
# registry, so the image is made from a local rootfs and imported.
#
# Idempotent: does nothing when the image already exists. Run as root.
# The image lands in podman's default storage (/var/lib/containers/storage,
# from storage.conf), which is also the storage of the service berth starts:
# berth's containers.conf changes runtime settings, not the storage location.
#
# Environment:
#   IMAGE   image name (default localhost/busybox:latest)
#   FORCE=1 rebuild even if the image exists
set -euo pipefail

IMAGE="${IMAGE:-localhost/busybox:latest}"
BUSYBOX=/bin/busybox

if [[ "$(id -u)" -ne 0 ]]; then
	echo "build-busybox.sh: must run as root (podman's root storage)" >&2
	exit 1
fi
if ! command -v podman >/dev/null 2>&1; then
	echo "build-busybox.sh: podman is not installed" >&2
	exit 1
fi

if [[ "${FORCE:-0}" != 1 ]] && podman image exists "$IMAGE"; then
	echo "build-busybox.sh: $IMAGE already exists"
	exit 0
fi

# The dynamically linked busybox package also installs /bin/busybox; only
# the static one works in an otherwise empty rootfs.
if ! dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'install ok installed'; then
	echo "build-busybox.sh: installing busybox-static" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q busybox-static >&2
fi
if ! file -L "$BUSYBOX" 2>/dev/null | grep -q 'statically linked' &&
	! ldd "$BUSYBOX" 2>&1 | grep -q 'not a dynamic executable'; then
	echo "build-busybox.sh: $BUSYBOX is not statically linked" >&2
	exit 1
fi

rootfs="$(mktemp -d /tmp/berth-busybox-rootfs.XXXXXX)"
trap 'rm -rf -- "$rootfs"' EXIT

mkdir -p "$rootfs"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,root,var/www}
install -m 0755 "$BUSYBOX" "$rootfs/bin/busybox"
# --install runs the rootfs's own busybox, so the links point at /bin/busybox
# inside the image, not at a path on the host.
chroot "$rootfs" /bin/busybox --install -s /bin
install -d -m 1777 "$rootfs/tmp"

cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
EOF
cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
www-data:x:33:
nogroup:x:65534:
EOF
echo 'berth busybox image' >"$rootfs/var/www/index.html"

tar -C "$rootfs" -c . | podman import --quiet --change 'CMD ["/bin/sh"]' - "$IMAGE" >/dev/null
echo "build-busybox.sh: built $IMAGE"
