#!/usr/bin/env bash
# Builds the real cloud-controller-manager of cloud-provider-azure, the
# `upstream` writer of the Azure lab and of the test that keeps the ARM
# emulator honest (internal/emulated/azurearm), from the
# sigs.k8s.io/cloud-provider-azure Go module through a generated wrapper module
# pinned to one release.
#
# The binary lands in a cache directory keyed by version and is reused when
# present (hack/lib/cache.sh). Prints the binary's path on stdout. What runs
# the CCM builds it on first use (internal/lab/ccm's Binary, BinaryVersion).
#
# Usage: hack/cloud-provider-azure.sh [VERSION]
# VERSION is a release tag of sigs.k8s.io/cloud-provider-azure (v1.36.3, the
# default, or v1.33.2, say); without it ZERODROP_CCM_AZURE_VERSION, then the
# default.
#
# Cold build on a 2-core machine: about 6 min, ~2 GB peak. Warm: instant.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/cache.sh"

VERSION="${1:-${ZERODROP_CCM_AZURE_VERSION:-v1.36.3}}"
if ! [[ "$VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
	echo "cloud-provider-azure: version $VERSION is not a release tag (vX.Y.Z)" >&2
	exit 2
fi
DIR="$CACHE/cloud-provider-azure/$VERSION"
BIN="$DIR/cloud-controller-manager"

cache_reuse_or_lock cloud-provider-azure "$DIR" "$BIN" test -x "$BIN"

tools="$DIR/.tools"
mkdir -p "$tools"
if [ ! -f "$tools/go.mod" ]; then
	printf 'module zerodrop.dev/tools/cloudproviderazure\n\ngo 1.26\n' >"$tools/go.mod.tmp"
	mv "$tools/go.mod.tmp" "$tools/go.mod"
fi
log "building cloud-controller-manager $VERSION (minutes on a cold cache)"
start=$SECONDS
(
	cd "$tools"
	GOFLAGS=-mod=mod go get "sigs.k8s.io/cloud-provider-azure@$VERSION" >&2
	# A release may require a module of its own repository that the checksum
	# database does not list (v1.33.2's pkg/azclient v0.8.5: the database
	# answers 404, and the build stops there); the release's go.sum records
	# that module's hash, so the go command checks the download against it.
	sum="$(GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' "sigs.k8s.io/cloud-provider-azure")/go.sum"
	sort -u go.sum "$sum" >go.sum.tmp && mv go.sum.tmp go.sum
	GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN.tmp" sigs.k8s.io/cloud-provider-azure/cmd/cloud-controller-manager
)
mv "$BIN.tmp" "$BIN"
log "built cloud-controller-manager $VERSION in $((SECONDS - start)) s"
echo "$BIN"
