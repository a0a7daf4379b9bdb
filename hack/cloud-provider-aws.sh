#!/usr/bin/env bash
# Builds the real aws-cloud-controller-manager of cloud-provider-aws, the
# client that keeps the AWS emulator honest (internal/emulated/awsapi,
# TestRealAWSCCM in internal/lab/ccm), from the k8s.io/cloud-provider-aws Go
# module through a generated wrapper module pinned to one release.
#
# The binary lands in a cache directory keyed by version and is reused when
# present (hack/lib/cache.sh). Prints the binary's path on stdout. What runs
# the CCM builds it on first use (internal/lab/ccm's AWSBinary).
#
# Usage: hack/cloud-provider-aws.sh [VERSION]
# VERSION is a release tag of k8s.io/cloud-provider-aws (v1.37.1, the
# default); without it ZERODROP_CCM_AWS_VERSION, then the default.
#
# Cold build on a 2-core machine shared with other work (load 7-12): with
# empty build and module caches 22 min wall, 970 s of CPU, 3.7 GB peak; with
# the build cache of the other deps builds (control plane, cloud-provider-azure,
# helm) 14 min wall, 780 s of CPU: it shares little with them (k8s.io v0.37).
# Warm: instant.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/cache.sh"

build_release_command cloud-provider-aws k8s.io/cloud-provider-aws \
	"${1:-${ZERODROP_CCM_AWS_VERSION:-v1.37.1}}" cmd/aws-cloud-controller-manager
