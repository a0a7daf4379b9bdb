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
# Built without optimisation outside the standard library (hack/lib/cache.sh
# says why). On a 2-core machine with nothing else running and the modules
# downloaded: 314 s, 602 s of CPU, with the build cache of the other deps
# builds (it shares little with them but the standard library: k8s.io
# v0.37.0). Warm: instant.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/cache.sh"

build_release_command cloud-provider-aws k8s.io/cloud-provider-aws \
	"${1:-${ZERODROP_CCM_AWS_VERSION:-v1.37.1}}" cmd/aws-cloud-controller-manager
