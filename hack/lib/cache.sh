# Sourced by the scripts that build a binary from the Go module proxy
# (hack/control-plane.sh, hack/helm.sh, hack/cloud-provider-azure.sh,
# hack/cloud-provider-aws.sh): the cache they build into, the lock that keeps
# two builds of one thing apart, and the build of one release's command.
# Each script prints what it built (or found) on stdout and nothing else; its
# progress goes to stderr, and only while it builds.

# The cache root: a directory per thing and version below it; nothing in it is
# ever committed.
CACHE="${ZERODROP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zerodrop}"

# cache_name is the prefix of log's lines, set by cache_reuse_or_lock.
cache_name=build

log() { echo "$cache_name: $*" >&2; }

# cache_reuse_or_lock NAME DIR OUT READY...: when the command READY succeeds
# (what NAME builds is in DIR already), prints OUT and exits the script.
# Otherwise takes DIR's lock — parallel test packages, and `make -j`'s
# targets, would build the same binary twice — checks READY again under it
# (the holder before may have built it meanwhile), and returns: the caller
# builds, holding the lock until it exits.
cache_reuse_or_lock() {
	cache_name="$1"
	local dir="$2" out="$3"
	shift 3
	if "$@"; then
		echo "$out"
		exit 0
	fi
	command -v go >/dev/null || { log "go is required"; exit 1; }
	mkdir -p "$dir"
	exec 9>"$dir/.lock"
	flock 9
	if "$@"; then
		echo "$out"
		exit 0
	fi
}

# build_release_command NAME MODULE VERSION PKG: builds the command PKG (a
# package path inside MODULE, cmd/<binary>) of MODULE's release VERSION into
# $CACHE/NAME/VERSION/<binary>, or finds it there, and prints the binary's
# path; progress goes to stderr. Exits 2 when VERSION is not a release tag.
# When the binary is cached already it exits the script (cache_reuse_or_lock),
# so call it last and not in a subshell.
#
# The build goes through a generated wrapper module pinned to the release,
# which takes the release's go.sum hashes too: they pin what the release's own
# build resolved, and a release may require a module of its own repository
# that the checksum database does not list (cloud-provider-azure v1.33.2's
# pkg/azclient v0.8.5: the database answers 404 and the build stops there);
# with the hash in go.sum the go command checks the download against it.
#
# The release's code is compiled without optimisation or inlining (-N -l),
# the standard library as every other build here compiles it (so its
# packages come from the build cache those builds filled). These binaries are
# the lab's baselines, the cloud controller managers: the same code, whose
# work is API calls and their clocks, not CPU; what -N -l saves is the
# build's CPU, which a cold make test spends on 2 saturated cores: for
# cloud-provider-aws v1.37.1, 957 s of CPU (496 s) optimised, 623 s (323 s)
# with -N -l on every package, the standard library included, each with an
# empty build cache (the README's "Cold CI"). Not for cloud-provider-azure,
# whose optimised build shares helm's k8s.io packages: 579 s against 562 s;
# and a cold make test showed no gain. The cache directory's name says so
# (-noopt): a binary built the other way before is not taken for this one.
build_release_command() {
	local name="$1" module="$2" version="$3" pkg="$4"
	if ! [[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
		echo "$name: version $version is not a release tag (vX.Y.Z)" >&2
		exit 2
	fi
	local dir="$CACHE/$name/$version-noopt"
	local bin="$dir/${pkg##*/}"
	cache_reuse_or_lock "$name" "$dir" "$bin" test -x "$bin"

	local tools="$dir/.tools"
	mkdir -p "$tools"
	if [ ! -f "$tools/go.mod" ]; then
		# The module's name is only the wrapper's own; dashes dropped.
		printf 'module zerodrop.dev/tools/%s\n\ngo 1.26\n' "${name//-/}" >"$tools/go.mod.tmp"
		mv "$tools/go.mod.tmp" "$tools/go.mod"
	fi
	log "building ${pkg##*/} $version (minutes on a cold cache)"
	local start=$SECONDS
	(
		cd "$tools"
		GOFLAGS=-mod=mod go get "$module@$version" >&2
		local sum
		sum="$(GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' "$module")/go.sum"
		sort -u go.sum "$sum" >go.sum.tmp && mv go.sum.tmp go.sum
		GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -gcflags='all=-N -l' -gcflags='std=' -ldflags "-s -w" -o "$bin.tmp" "$module/$pkg"
	)
	mv "$bin.tmp" "$bin"
	log "built ${pkg##*/} $version in $((SECONDS - start)) s"
	echo "$bin"
}
