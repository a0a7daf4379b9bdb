#!/usr/bin/env bash
# Builds the real control plane used by integration tests and the lab:
# kube-apiserver, kube-controller-manager and kube-proxy from the k8s.io/kubernetes Go module
# (through a generated tools module that maps every staging module to its
# published v0.X.Y) and etcd from the etcd Go modules.
#
# Binaries land in a cache directory keyed by version and are reused when present
# (hack/lib/cache.sh). Prints the asset directory on stdout.
#
# Cold build on a 2-core machine: about 4 min (kube-apiserver, ~2.8 GB peak),
# +80 s (kube-controller-manager), ~30 s (kube-proxy), <1 min (etcd). Warm: instant.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/cache.sh"

K8S_VERSION="${ZERODROP_K8S_VERSION:-v1.37.2}"
ETCD_VERSION="${ZERODROP_ETCD_VERSION:-v3.6.16}"
ASSETS="$CACHE/control-plane/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}"
WANT="${1:-all}" # all | apiserver (kube-apiserver + etcd only) | kube-proxy (kube-proxy only)

# built: what WANT names is in the cache.
built() {
	case "$WANT" in
	all) [ -x "$ASSETS/kube-apiserver" ] && [ -x "$ASSETS/etcd" ] && [ -x "$ASSETS/kube-controller-manager" ] && [ -x "$ASSETS/kube-proxy" ] ;;
	kube-proxy) [ -x "$ASSETS/kube-proxy" ] ;;
	*) [ -x "$ASSETS/kube-apiserver" ] && [ -x "$ASSETS/etcd" ] ;;
	esac
}

cache_reuse_or_lock control-plane "$ASSETS" "$ASSETS" built

minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
staging_version="v0.${K8S_VERSION#v1.}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"

build_k8s() {
	local tools="$ASSETS/.tools-k8s"
	mkdir -p "$tools"
	if [ ! -f "$tools/go.mod" ]; then
		local modfile
		modfile="$(cd "$tools" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
		{
			echo "module zerodrop.dev/tools/controlplane"
			echo
			grep -E '^go ' "$modfile"
			echo
			echo "require k8s.io/kubernetes ${K8S_VERSION}"
			echo
			echo "replace ("
			# Staging modules are published as v0.X.Y; the samples have no such release.
			grep -E '=> \./staging/src/' "$modfile" | awk '{print $1}' |
				grep -v -e sample-cli-plugin -e sample-controller |
				while read -r m; do echo "	$m => $m ${staging_version}"; done
			echo ")"
		} >"$tools/go.mod.tmp"
		mv "$tools/go.mod.tmp" "$tools/go.mod"
	fi
	for cmd in "$@"; do
		[ -x "$ASSETS/$cmd" ] && continue
		log "building $cmd ${K8S_VERSION} (minutes on a cold cache)"
		local start=$SECONDS
		(cd "$tools" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$ASSETS/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd")
		mv "$ASSETS/$cmd.tmp" "$ASSETS/$cmd"
		log "built $cmd in $((SECONDS - start)) s"
	done
}

build_etcd() {
	[ -x "$ASSETS/etcd" ] && return
	log "building etcd ${ETCD_VERSION}"
	local start=$SECONDS tools="$ASSETS/.tools-etcd"
	mkdir -p "$tools"
	# etcd's own go.mod has replace lines, so `go install pkg@version` refuses it;
	# a tiny module requiring it builds the same package.
	printf 'module zerodrop.dev/tools/etcd\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$tools/go.mod"
	(cd "$tools" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$ASSETS/etcd.tmp" go.etcd.io/etcd/server/v3)
	mv "$ASSETS/etcd.tmp" "$ASSETS/etcd"
	log "built etcd in $((SECONDS - start)) s"
}

case "$WANT" in
all) build_etcd; build_k8s kube-apiserver kube-controller-manager kube-proxy ;;
kube-proxy) build_k8s kube-proxy ;;
*) build_etcd; build_k8s kube-apiserver ;;
esac
echo "$ASSETS"
