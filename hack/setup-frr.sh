#!/usr/bin/env bash
# Installs FRR (the Debian package) when it is missing. The BGP speaker's tests
# peer with a real FRR router (bgpd and zebra) that they start in a network
# namespace of their own, with their own configuration and state directories.
set -euo pipefail
if [ -x /usr/lib/frr/bgpd ] && [ -x /usr/lib/frr/zebra ] && command -v vtysh >/dev/null 2>&1; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	SUDO=sudo
else
	SUDO=
fi
echo "setup: installing frr from the distribution's packages" >&2
$SUDO apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends frr >&2
# The package enables a system service routing in the root namespace; the tests
# run their own daemons and must never have that one start.
if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now frr >/dev/null 2>&1 || true; fi
# sed reads all of it: head would close the pipe early, and under pipefail
# the writer's SIGPIPE (141) would fail the install.
/usr/lib/frr/bgpd --version | sed -n 1p >&2
