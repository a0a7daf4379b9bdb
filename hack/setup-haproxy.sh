#!/usr/bin/env bash
# Installs HAProxy (the Debian package) when it is missing. Tests and the lab
# drive a real HAProxy; nothing is mocked. zerodrop runs its own instances: the
# package's system service is disabled.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/packages.sh"

if command -v haproxy >/dev/null 2>&1; then
	exit 0
fi
install_package haproxy haproxy
# sed reads all of it: head would close the pipe early, and under pipefail
# haproxy's SIGPIPE (141) failed the install on a cold machine.
haproxy -v | sed -n 1p >&2
