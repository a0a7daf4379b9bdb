# Sourced by the scripts that install what the tests and the lab run from the
# distribution's packages (hack/setup-haproxy.sh, hack/setup-frr.sh). Each
# script checks first whether what it needs is there, and calls this only when
# it is not: on a machine that has it, nothing runs as root.

# install_package PACKAGE [SERVICE]: installs the Debian package PACKAGE (with
# sudo when not root), without its recommended packages; progress goes to
# stderr. When SERVICE is given, disables and stops the system service of that
# name that the package enabled: zerodrop's tests and lab run daemons of their
# own, with their own configuration, and the system one must never start.
install_package() {
	local package="$1" service="${2:-}" sudo=
	if [ "$(id -u)" != 0 ]; then
		sudo=sudo
	fi
	echo "setup: installing $package from the distribution's packages" >&2
	$sudo apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$package" >&2
	if [ -n "$service" ] && command -v systemctl >/dev/null 2>&1; then
		$sudo systemctl disable --now "$service" >/dev/null 2>&1 || true
	fi
}
