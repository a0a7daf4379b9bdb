# Sourced by the scripts that build a binary from the Go module proxy
# (hack/control-plane.sh, hack/helm.sh, hack/cloud-provider-azure.sh): the
# cache they build into and the lock that keeps two builds of one thing apart.
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
