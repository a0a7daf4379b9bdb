#!/usr/bin/env bash
# Builds the real cloud-controller-manager of cloud-provider-azure, the
# `upstream` writer of the Azure lab and of the test that keeps the ARM
# emulator honest (internal/emulated/azurearm), from the
# sigs.k8s.io/cloud-provider-azure Go module through a generated wrapper module
# pinned to one release.
#
# The binary lands in a cache directory keyed by version and is reused when
# present (hack/lib/cache.sh). Prints the binary's path on stdout. What runs
# the CCM builds it on first use (internal/lab/ccm's Binary, BinaryVersion).
#
# Usage: hack/cloud-provider-azure.sh [VERSION]
# VERSION is a release tag of sigs.k8s.io/cloud-provider-azure (v1.36.3, the
# default, or v1.33.2, say); without it ZERODROP_CCM_AZURE_VERSION, then the
# default.
#
# Built without optimisation outside the standard library (hack/lib/cache.sh):
# 310 s and 566 s of CPU on a 2-core machine with nothing else running, the
# modules downloaded and the other deps builds' build cache. That saves it
# little: optimised, it takes its k8s.io v0.36.2 packages from helm's build
# (579 s of CPU optimised against 562 s so, on helm's build cache alone; the
# README's "Cold CI"). Warm: instant.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/cache.sh"

build_release_command cloud-provider-azure sigs.k8s.io/cloud-provider-azure \
	"${1:-${ZERODROP_CCM_AZURE_VERSION:-v1.36.3}}" cmd/cloud-controller-manager
