#!/usr/bin/env bash
# Installs FRR (the Debian package) when it is missing. The BGP speaker's tests
# peer with a real FRR router (bgpd and zebra) that they start in a network
# namespace of their own, with their own configuration and state directories;
# the package's system service, routing in the root namespace, is disabled.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/packages.sh"

if [ -x /usr/lib/frr/bgpd ] && [ -x /usr/lib/frr/zebra ] && command -v vtysh >/dev/null 2>&1; then
	exit 0
fi
install_package frr frr
# sed reads all of it: head would close the pipe early, and under pipefail
# the writer's SIGPIPE (141) would fail the install.
/usr/lib/frr/bgpd --version | sed -n 1p >&2
