#!/usr/bin/env bash
# Installs HAProxy (the Debian package) when it is missing. Tests and the lab
# drive a real HAProxy; nothing is mocked.
set -euo pipefail
if command -v haproxy >/dev/null 2>&1; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	SUDO=sudo
else
	SUDO=
fi
echo "setup: installing haproxy from the distribution's packages" >&2
$SUDO apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends haproxy >&2
# The package enables a system service; zerodrop runs its own instances.
if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now haproxy >/dev/null 2>&1 || true; fi
# sed reads all of it: head would close the pipe early, and under pipefail
# haproxy's SIGPIPE (141) failed the install on a cold machine.
haproxy -v | sed -n 1p >&2
