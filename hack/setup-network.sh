#!/usr/bin/env bash
# Installs the tools the lab's network namespaces need when they are missing:
# `ip` (iproute2) makes namespaces, veths and bridges; `nft` (nftables) is what
# the real kube-proxy runs in --proxy-mode nftables.
set -euo pipefail
missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
	SUDO=sudo
else
	SUDO=
fi
echo "setup: installing ${missing[*]} from the distribution's packages" >&2
$SUDO apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
# The nftables package may enable a service that loads a ruleset at boot; the lab
# only ever touches tables inside namespaces it made.
if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable nftables >/dev/null 2>&1 || true; fi
