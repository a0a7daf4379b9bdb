#!/usr/bin/env bash
# Builds the real helm v3 CLI (helm.sh/helm/v3/cmd/helm) from the Go module proxy,
# for the analyzer's tests that render a chart with `helm template` the way a user
# does. The distribution has no helm package.
#
# Like hack/control-plane.sh, the binary lands in a cache directory keyed by
# version and is reused when present (hack/lib/cache.sh). Prints the path of the
# helm binary on stdout. Cold build on a 2-core machine: a few minutes.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/cache.sh"

HELM_VERSION="${ZERODROP_HELM_VERSION:-v3.21.4}"
DIR="$CACHE/helm/${HELM_VERSION}"
BIN="$DIR/helm"

cache_reuse_or_lock helm "$DIR" "$BIN" test -x "$BIN"

log "building helm ${HELM_VERSION} (minutes on a cold cache)"
start=$SECONDS
tools="$DIR/.tools"
mkdir -p "$tools"
# helm's go.mod may carry replace lines, which `go install pkg@version` refuses;
# a tiny module requiring it builds the same package.
printf 'module zerodrop.dev/tools/helm\n\ngo 1.24\n\nrequire helm.sh/helm/v3 %s\n' "$HELM_VERSION" >"$tools/go.mod"
(cd "$tools" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
	-o "$BIN.tmp" helm.sh/helm/v3/cmd/helm)
mv "$BIN.tmp" "$BIN"
log "built helm in $((SECONDS - start)) s"
echo "$BIN"
