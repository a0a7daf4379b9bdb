#!/usr/bin/env bash
# Builds the real aws-cloud-controller-manager of cloud-provider-aws, the
# client that keeps the AWS emulator honest (internal/emulated/awsapi,
# TestRealAWSCCM in internal/lab/ccm), from the k8s.io/cloud-provider-aws Go
# module through a generated wrapper module pinned to one release.
#
# The binary lands in a cache directory keyed by version and is reused when
# present (hack/lib/cache.sh). Prints the binary's path on stdout. What runs
# the CCM builds it on first use (internal/lab/ccm's AWSBinary).
#
# Usage: hack/cloud-provider-aws.sh [VERSION]
# VERSION is a release tag of k8s.io/cloud-provider-aws (v1.37.1, the
# default); without it ZERODROP_CCM_AWS_VERSION, then the default.
#
# Cold build on a 2-core machine shared with other work (load 7-12): with
# empty build and module caches 22 min wall, 970 s of CPU, 3.7 GB peak; with
# the build cache of the other deps builds (control plane, cloud-provider-azure,
# helm) 14 min wall, 780 s of CPU: it shares little with them (k8s.io v0.37).
# Warm: instant.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/cache.sh"

VERSION="${1:-${ZERODROP_CCM_AWS_VERSION:-v1.37.1}}"
if ! [[ "$VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
	echo "cloud-provider-aws: version $VERSION is not a release tag (vX.Y.Z)" >&2
	exit 2
fi
DIR="$CACHE/cloud-provider-aws/$VERSION"
BIN="$DIR/aws-cloud-controller-manager"

cache_reuse_or_lock cloud-provider-aws "$DIR" "$BIN" test -x "$BIN"

tools="$DIR/.tools"
mkdir -p "$tools"
if [ ! -f "$tools/go.mod" ]; then
	printf 'module zerodrop.dev/tools/cloudprovideraws\n\ngo 1.26\n' >"$tools/go.mod.tmp"
	mv "$tools/go.mod.tmp" "$tools/go.mod"
fi
log "building aws-cloud-controller-manager $VERSION (minutes on a cold cache)"
start=$SECONDS
(
	cd "$tools"
	GOFLAGS=-mod=mod go get "k8s.io/cloud-provider-aws@$VERSION" >&2
	# The release's go.sum pins what its own build resolved; the wrapper
	# takes its hashes too, as hack/cloud-provider-azure.sh does.
	sum="$(GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' "k8s.io/cloud-provider-aws")/go.sum"
	sort -u go.sum "$sum" >go.sum.tmp && mv go.sum.tmp go.sum
	GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN.tmp" k8s.io/cloud-provider-aws/cmd/aws-cloud-controller-manager
)
mv "$BIN.tmp" "$BIN"
log "built aws-cloud-controller-manager $VERSION in $((SECONDS - start)) s"
echo "$BIN"
