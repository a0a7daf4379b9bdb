#!/usr/bin/env bash
# Builds zerodrop's container images on this machine, without docker and
# without pulling a base image, as OCI image layouts:
#
#   bin/images/zerodrop            the controller: a minimal root filesystem
#                                  (CA certificates, time zones, /etc/services,
#                                  passwd/group with the nonroot user 65532) and
#                                  the static binary at /zerodrop
#   bin/images/zerodrop-dataplane  the same binary on a Debian root filesystem
#                                  with HAProxy, for the HAProxy data plane
#
# Both root filesystems come from Debian's packages through mmdebstrap (the
# host's apt sources, the host's Debian release); the controller's keeps only
# the files it reads from the build chroot. Then hack/image/image_test.go checks
# the media types and config, unpacks each image and runs `zerodrop version`
# (and `haproxy -v`) inside it with chroot --userspec as the image's user.
# Needs root (mmdebstrap --mode=root, chroot). Push with any OCI tool, e.g.
# `skopeo copy oci:bin/images/zerodrop:dev docker://REGISTRY/zerodrop:dev`.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${ZERODROP_IMAGE_DIR:-$ROOT/bin/images}"
TAG="${ZERODROP_IMAGE_TAG:-dev}"
GO="${GO:-go}"

log() { echo "image: $*" >&2; }

if [ "$(id -u)" != 0 ]; then
	log "needs root (mmdebstrap --mode=root and chroot); run it with sudo"
	exit 1
fi
if ! command -v mmdebstrap >/dev/null; then
	log "installing mmdebstrap from the distribution's packages"
	apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
fi
. /etc/os-release
SUITE="${ZERODROP_IMAGE_SUITE:-${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}}"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"

log "building the static binary"
CGO_ENABLED=0 "$GO" build -C "$ROOT" -trimpath \
	-ldflags "-s -w -X zerodrop.dev/zerodrop/internal/version.Version=$TAG" \
	-o "$WORK/zerodrop" ./cmd/zerodrop

# Documentation, manual pages and translations are not needed at run time.
EXCLUDES=(--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*'
	--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*')

log "data-plane root filesystem: Debian $SUITE, essential packages and haproxy (mmdebstrap)"
mmdebstrap --quiet --mode=root --variant=essential --include=ca-certificates,tzdata,netbase,haproxy \
	"${EXCLUDES[@]}" --format=directory "$SUITE" "$WORK/dataplane" >/dev/null
rm -rf "$WORK/dataplane/var/cache/apt"/* "$WORK/dataplane/var/lib/apt/lists"/* "$WORK/dataplane/dev"/*

# The nonroot user of both images (uid and gid 65532), with a home it owns.
add_nonroot() {
	local fs="$1"
	mkdir -p "$fs/etc" "$fs/home/nonroot" "$fs/tmp"
	grep -q '^nonroot:' "$fs/etc/passwd" 2>/dev/null ||
		echo 'nonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin' >>"$fs/etc/passwd"
	grep -q '^nonroot:' "$fs/etc/group" 2>/dev/null || echo 'nonroot:x:65532:' >>"$fs/etc/group"
	chown 65532:65532 "$fs/home/nonroot"
	chmod 1777 "$fs/tmp"
}
add_nonroot "$WORK/dataplane"

log "controller root filesystem: the files it reads, taken from that build"
CTRL="$WORK/controller"
for f in etc/ssl/certs/ca-certificates.crt usr/share/zoneinfo etc/services etc/nsswitch.conf etc/os-release usr/lib/os-release; do
	mkdir -p "$CTRL/$(dirname "$f")"
	cp -a "$WORK/dataplane/$f" "$CTRL/$f"
done
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\n' >"$CTRL/etc/passwd"
printf 'root:x:0:\n' >"$CTRL/etc/group"
add_nonroot "$CTRL"

log "writing the OCI image layouts"
"$GO" run -C "$ROOT" ./hack/image --rootfs "$CTRL" --binary "$WORK/zerodrop" --out "$OUT/zerodrop" --ref "zerodrop:$TAG"
"$GO" run -C "$ROOT" ./hack/image --rootfs "$WORK/dataplane" --binary "$WORK/zerodrop" --out "$OUT/zerodrop-dataplane" --ref "zerodrop-dataplane:$TAG"
du -sh "$OUT/zerodrop" "$OUT/zerodrop-dataplane" >&2

log "testing the images"
ZERODROP_IMAGE_DIR="$OUT" ZERODROP_IMAGE_TAG="$TAG" "$GO" test -C "$ROOT" -count=1 -tags image ./hack/image/
