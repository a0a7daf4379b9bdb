# zerodrop — see README.md. Every target installs or builds what it needs.
GO            ?= go
GOTESTFLAGS   ?= -count=1 -timeout 30m
STATICCHECK   ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCH_N       ?= 1000

.PHONY: all build image chaos procmem deps lab-deps packages control-plane cloud-provider-azure cloud-provider-aws helm render-deploy haproxy frr network test test-race test-lab vet test-long unit lint fmt-check bench lab lab-azure demo clean docs

all: build

build:
	$(GO) build -o bin/zerodrop ./cmd/zerodrop

# The container images as OCI image layouts under bin/images (controller, and
# HAProxy data plane), from Debian's packages without docker, then their test
# (hack/image.sh; needs root).
image:
	@GO=$(GO) bash hack/image.sh

# The real parts the tests and the demo run against: kube-apiserver, etcd and
# kube-controller-manager (and kube-proxy) built from the Go module proxy (cached), and HAProxy
# from the distribution's packages.
control-plane:
	@bash hack/control-plane.sh all >/dev/null

# The real cloud-controller-manager of cloud-provider-azure, which the ARM
# emulator's test (internal/lab/ccm) and the Azure lab run as upstream, built
# from the Go module proxy (cached). What runs it also builds it on first use
# (internal/lab/ccm's Binary: the same script, cache and lock); this target
# builds it ahead, beside the others (deps), for make test.
cloud-provider-azure:
	@bash hack/cloud-provider-azure.sh >/dev/null

# The real aws-cloud-controller-manager of cloud-provider-aws, which the AWS
# emulator's test (internal/lab/ccm's TestRealAWSCCM) runs, built from the Go
# module proxy (cached) the same way; deps builds it beside the others.
cloud-provider-aws:
	@bash hack/cloud-provider-aws.sh >/dev/null

# The real helm v3 CLI for the chart tests (the analyzer's, internal/install's)
# and hack/render-deploy.sh, built from the Go module proxy (cached); the
# distribution has no package.
helm:
	@bash hack/helm.sh >/dev/null

# deploy/ is charts/zerodrop rendered with hack/deploy-values.yaml; run this
# after changing the chart (internal/install's test fails until then).
render-deploy: helm
	bash hack/render-deploy.sh

haproxy:
	@bash hack/setup-haproxy.sh

# FRR (bgpd, zebra, vtysh): the real router internal/bgp's tests peer with.
frr:
	@bash hack/setup-frr.sh

# iproute2 and nftables for the lab's network namespaces (internal/lab/netlab).
network:
	@bash hack/setup-network.sh

# Everything at once, for make test (whose TestRealCCM and Azure tests run
# cloud-provider-azure, TestRealAWSCCM cloud-provider-aws), the benches,
# lab-azure, chaos and the demo: the four builds from the Go module proxy
# overlap (one's downloads and links beside
# another's compiles; each script takes its own lock) and the distribution's
# packages install meanwhile, one apt-get after the other (they share dpkg's
# lock). make lab builds less (lab-deps).
deps:
	@$(MAKE) --no-print-directory -j4 control-plane cloud-provider-azure cloud-provider-aws helm packages

packages:
	@$(MAKE) --no-print-directory haproxy
	@$(MAKE) --no-print-directory frr
	@$(MAKE) --no-print-directory network

# Unit and integration tests (real apiserver + etcd, real HAProxy).
#
# The flood tests alone (below), then two lines side by side. test-race:
# every package but the lab's, under the race detector (the controllers,
# gates, data plane, providers, webhook and their integration tests).
# test-lab: the lab's packages (internal/lab/...) without it: they
# orchestrate real processes and mostly wait on their clocks, the race
# detector multiplied their CPU time on 2 cores, and the upstream service
# controller they run as the baseline races with itself
# (internal/lab/upstream/upstream_test.go), so its tests are built for
# !race. The data-plane labs (LABTESTS_ALONE: four HAProxy and zerodrop
# processes, the lab's pod servers in its own process; TestLabUpdate the
# chart's data plane updated with surge; TestLabBGPSpeakerRestart the
# speakers restarted behind a real FRR router; TestLabAWSGates a gates-mode
# rollout on emulated AWS beside the real cloud-provider-aws) run after the lab's other tests, never
# beside them, while test-race may still run; before its tests the lab's line
# runs the vets, which compile every package without the race detector (the
# compiles its tests use) while the race line compiles with it. (Run before
# both lines, the vets held the race line back: a cold make test at 3d73ae1
# spent 11 min in them, then the race line ended 5 min after the lab's with
# CPU idle.) go test prints a package's result when it ends, so the two
# lines' output interleaves by package.
LABTESTS_ALONE := TestLabDataPlane|TestLabFromChart|TestLabUpdate|TestLabBGPSpeakerRestart|TestLabAWSGates

# go vet runs every analyzer once, over every package and its test files (and
# the files built only for -tags lab); the go test lines below then pass
# -vet=off. go test would vet again with a subset of those analyzers, and as
# the facts it needs from every dependency are cached per analyzer set and
# build configuration, it type-checked the whole dependency tree twice more
# (once under -race): about 590 s of CPU, measured warm with that subset and
# the race line's packages. Left unvetted: internal/testutil/race_on.go, one
# constant. Vetting it with -tags race compiled its 757 dependencies again
# (the standard library has files for that tag): 253 s on a cold machine.
GOTESTVET := -vet=off

test: deps fmt-check
	# The state endpoint's flood test asserts a time bound (the gate opens
	# within its unflooded time plus 2 s) and the relay's flood test the
	# relay process' memory (it is the test binary), which the race
	# detector's slowdown and shadow memory would break: they run without
	# it (and skip under -race), alone.
	$(GO) test $(GOTESTVET) -count=1 -timeout 10m -run 'TestGateOpensDuringFlood|TestRelayFloodStaysUnderItsMemoryLimit' ./internal/dataplane/ ./internal/drainrelay/
	@$(MAKE) --no-print-directory -j2 test-race test-lab

# The AWS emulator's tests drive it with the real aws-sdk-go-v2 clients,
# EC2's among them, whose package takes minutes of CPU to compile and more
# under the race detector: they run in the lab's line, without it, where the
# lab's CCM test compiles the same client anyway.
RACE_SKIP := /internal/lab|/internal/emulated/awsapi

test-race:
	$(GO) test -race $(GOTESTVET) $(GOTESTFLAGS) $$($(GO) list ./... | grep -Ev '$(RACE_SKIP)')

vet:
	$(GO) vet ./...
	$(GO) vet -tags lab ./cmd/...

test-lab: vet
	$(GO) test $(GOTESTVET) $(GOTESTFLAGS) -skip '$(LABTESTS_ALONE)' ./internal/lab/... ./internal/emulated/awsapi/
	$(GO) test $(GOTESTVET) $(GOTESTFLAGS) -run '$(LABTESTS_ALONE)' ./internal/lab/

# The lab tests make test leaves out for their time, each a capability with
# a shorter smoke in make test: TestLabChaos (make chaos's scenarios,
# shortened), TestLabMaintenance, TestLabBGPServiceChurn (ZERODROP_LAB_LONG),
# and those an environment variable of their own enables: TestLabAWSRollout
# (ZERODROP_LAB_AWS), TestLabBGPNodeLeaveAndFail (ZERODROP_LAB_BGP_LEAVE),
# TestLabBGPRestarts (ZERODROP_LAB_BGP_RESTARTS), TestLabBGPAPIServerDown
# (ZERODROP_LAB_BGP_APISERVER), TestLabBGPSpeakerStopped
# (ZERODROP_LAB_BGP_STOP). One at a time (one package's tests run in turn):
# each runs its own lab.
LABTESTS_LONG := TestLabChaos|TestLabMaintenance|TestLabBGPServiceChurn|TestLabAWSRollout|TestLabBGPNodeLeaveAndFail|TestLabBGPRestarts|TestLabBGPAPIServerDown|TestLabBGPSpeakerStopped
test-long: deps
	ZERODROP_LAB_LONG=1 ZERODROP_LAB_AWS=1 ZERODROP_LAB_BGP_LEAVE=1 ZERODROP_LAB_BGP_RESTARTS=1 ZERODROP_LAB_BGP_APISERVER=1 ZERODROP_LAB_BGP_STOP=1 \
		$(GO) test -count=1 -timeout 90m -v -run '^($(LABTESTS_LONG))$$' ./internal/lab/

# The generated references (docs/flags.md, docs/metrics.md,
# docs/annotations.md) written anew from the code; TestReferenceDocs fails
# until they are.
docs:
	$(GO) test -count=1 -run TestReferenceDocs ./cmd/zerodrop/ -args -update

# Pure tests only: no control plane, no HAProxy.
unit:
	$(GO) test -count=1 -short ./internal/model/... ./internal/check/...

fmt-check:
	@out=$$(gofmt -l cmd internal hack 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

lint: fmt-check
	$(GO) vet ./...
	$(GO) vet -tags lab ./cmd/...
	$(GO) run $(STATICCHECK) ./...

# Writes and time to verify after a leader restart, zerodrop vs --sync=full,
# for BENCH_N LoadBalancer Services on the real apiserver and HAProxy; the
# same on the Azure emulator (BENCH_AZURE_N Services on BENCH_AZURE_LBS load
# balancers); plus the analyzer's throughput. BENCH_SCALE_N > 0 adds
# BenchmarkScale (build, peak RSS, restart, churn latency at that many
# Services of BENCH_SCALE_ENDPOINTS endpoints, BENCH_SCALE_WORKERS workers (0: the shipped
# default; the bench prints every flag it changed beside its figures);
# HAProxy needs a file descriptor per listener and per endpoint, so 50,000
# endpoints need `ulimit -Hn` above 60,000, or BENCH_SCALE_NO_STRICT_LIMITS=true
# to run HAProxy under a lower limit with `no strict-limits`; BENCH_SCALE_PROFILE
# names a file, absolute or relative to internal/bench, for a CPU profile of
# its restart phase, BENCH_SCALE_MEMPROFILE one for a heap profile at the end
# of its build), e.g. (docs/scale.md):
#   make bench BENCH_RUN=Scale BENCH_SCALE_N=5000 BENCH_SCALE_ENDPOINTS=2
#   make bench BENCH_RUN=Azure BENCH_AZURE_N=1000 BENCH_AZURE_LBS=10
BENCH_RUN           ?= .
BENCH_SCALE_N       ?= 0
BENCH_SCALE_ENDPOINTS ?= 10
BENCH_SCALE_WORKERS ?= 0
BENCH_SCALE_NO_STRICT_LIMITS ?= false
BENCH_SCALE_PROFILE ?=
BENCH_SCALE_MEMPROFILE ?=
BENCH_AZURE_N       ?= 500
BENCH_AZURE_LBS     ?= 2
# BenchmarkAzureChurn: the shipped controller under ARM's throttling, endpoint
# churn on BENCH_AZURE_CHURN_N Services for BENCH_AZURE_CHURN_FOR, e.g.
#   make bench BENCH_RUN=AzureChurn BENCH_AZURE_CHURN_N=1000
# and BenchmarkAzureGateOnlyRollout's BENCH_AZURE_GATE_ONLY_N gate-only Services.
BENCH_AZURE_CHURN_N   ?= 1000
BENCH_AZURE_CHURN_FOR ?= 60s
BENCH_AZURE_GATE_ONLY_N ?= 100
bench: deps
	$(GO) test -count=1 -timeout 90m -run '^$$' -bench '$(BENCH_RUN)' -benchtime 1x ./internal/bench/ -args -n $(BENCH_N) \
		-scale-n $(BENCH_SCALE_N) -scale-endpoints $(BENCH_SCALE_ENDPOINTS) -scale-workers $(BENCH_SCALE_WORKERS) -scale-no-strict-limits=$(BENCH_SCALE_NO_STRICT_LIMITS) \
		-scale-restart-cpuprofile '$(BENCH_SCALE_PROFILE)' -scale-build-memprofile '$(BENCH_SCALE_MEMPROFILE)' -azure-n $(BENCH_AZURE_N) -azure-lbs $(BENCH_AZURE_LBS) \
		-azure-churn-n $(BENCH_AZURE_CHURN_N) -azure-churn-for $(BENCH_AZURE_CHURN_FOR) -azure-gate-only-n $(BENCH_AZURE_GATE_ONLY_N)
	$(GO) test -count=1 -run '^$$' -bench . ./internal/check/...

# The main job: the disruption lab, the real upstream service controller (with
# a typical workload, and with the published recipe) and zerodrop side by side
# under real traffic. By default (LAB_FLAGS) the seed scenarios, the incidents
# zerodrop exists for, with externalTrafficPolicy: Local: a rollout, a Local
# pod moving node (rollout-local) and the writer restarted 3 times while
# WebSockets stay connected (restart-idle); it ends with a verdict per
# scenario and mode and the HTML report's path. Set LAB_FLAGS for others
# (e.g. "--scenario all --json lab.json"; --dry-run shows what would run).
# zerodrop is installed from the chart with its HAProxy data plane of two
# replicas (LAB_INSTALL; empty: the lab's own arrangement, one HAProxy; and
# empty with --provider azure-emulator in LAB_FLAGS, whose data plane is
# emulated Azure's).
LAB_FLAGS     ?= --scenario rollout,rollout-local,restart-idle --traffic-policy local --idle-restarts 3
LAB_INSTALL   ?= $(if $(findstring azure-emulator,$(LAB_FLAGS)),,--data-plane-replicas 2 --from-chart)
# What make lab builds before it starts, side by side: the control plane
# (kube-apiserver, etcd, kube-controller-manager, kube-proxy), helm when
# zerodrop is installed from the chart (--from-chart), and the distribution's
# packages (HAProxy, iproute2, nftables). Not cloud-provider-azure: the
# HAProxy scenarios never run it, and a run on the Azure emulator that does
# (LAB_FLAGS="--provider azure-emulator ...") builds it on first use
# (internal/lab/ccm: the same script, cache and lock as its target).
LAB_BUILDS     = control-plane packages $(if $(findstring --from-chart,$(LAB_INSTALL) $(LAB_FLAGS)),helm)
lab-deps:
	@$(MAKE) --no-print-directory -j3 $(LAB_BUILDS)

lab: lab-deps
	$(GO) run -tags lab ./cmd/zerodrop lab $(LAB_INSTALL) $(LAB_FLAGS)

# The Azure incidents with traffic (docs/azure.md, "Traffic through emulated
# Azure"): the real cloud-controller-manager of cloud-provider-azure with the
# typical workload (upstream), with the recipe (recipe) and with zerodrop's
# gates only (gates), beside zerodrop writing (zerodrop), on emulated Azure
# whose ARM writes take --arm-latency, one lab per point. The default is a
# short sweep of two points (1s and 10s, Local); the acceptance sweeps of
# docs/azure.md (30s, propagation, rule-health lag, both policies) go in
# AZURE_LAB_FLAGS and take hours on 2 cores.
AZURE_LAB_FLAGS ?= --mode upstream,recipe,gates,zerodrop --scenario rollout,rollout-local,restart-idle --traffic-policy local --arm-latency 1s,10s
lab-azure: deps
	$(GO) run -tags lab ./cmd/zerodrop lab --provider azure-emulator $(AZURE_LAB_FLAGS)

# Faults, with figures (docs/lab.md): on the real-network lab, the writer
# SIGKILLed at the first write of a plan 20 times during rolling updates, and
# kube-apiserver stopped for 30 s (every mode; each fails unless zerodrop lost
# nothing); on a data plane of two replicas, each replica's own zerodrop
# process killed mid-plan, and lb-replica-restart on zerodrop installed from
# the chart; then on emulated Azure, with 30 other Services on the load
# balancer and 20 % of ARM requests failing (412, 429, 500, slow) during
# each act, restarts, restart-idle, churn and 20 SIGKILLs of the leader at a
# plan's first write, zerodrop beside the real cloud-controller-manager of
# cloud-provider-azure (upstream), and zerodrop writing the CCM's own load
# balancer beside it (--azure-shared-lb). CHAOS_FLAGS adds flags to the
# first (e.g. "--json chaos.json").
CHAOS_FLAGS   ?=
chaos: deps
	$(GO) run -tags lab ./cmd/zerodrop lab --scenario kill-mid-plan,apiserver-down --mode all --backend both --traffic-policy both $(CHAOS_FLAGS)
	$(GO) run -tags lab ./cmd/zerodrop lab --scenario kill-mid-plan --mode zerodrop --backend both --traffic-policy both --data-plane-replicas 2 $(CHAOS_FLAGS)
	$(GO) run -tags lab ./cmd/zerodrop lab --scenario lb-replica-restart --mode zerodrop --backend both --traffic-policy both --data-plane-replicas 2 --from-chart $(CHAOS_FLAGS)
	$(GO) run -tags lab ./cmd/zerodrop lab --provider azure-emulator --scenario restart,restart-idle,churn,kill-mid-plan --mode upstream,zerodrop --azure-services 30 --azure-fault-rate 0.2 --arm-latency 1s
	$(GO) run -tags lab ./cmd/zerodrop lab --provider azure-emulator --scenario restart,churn --mode zerodrop --azure-shared-lb --azure-services 5 --azure-fault-rate 0.2 --arm-latency 1s

# hack/procmem: the real zerodrop controller (and, in the data-plane role,
# zerodrop haproxy) as the chart runs them, each under its chart container's
# default memory limit, against a real kube-apiserver with PROCMEM_N
# LoadBalancer Services and their Pods; per phase (build, restart, endpoint
# and Service churn) its time, writes, reloads, peak RSS and CPU seconds,
# and in the data-plane role the wait an unrelated rollout's readiness gate
# has while the replica builds (docs/scale.md). PROCMEM_ROLE: data-plane, control or all. PROCMEM_ARGS:
# procmem's other flags (go run ./hack/procmem -h), then after -- the
# controller's. Needs root (memory cgroups); one run at a time (fixed
# loopback addresses).
PROCMEM_N    ?= 500
PROCMEM_ROLE ?= data-plane
PROCMEM_ARGS ?=
procmem:
	@$(MAKE) --no-print-directory -j3 control-plane haproxy helm
	$(GO) run ./hack/procmem -n $(PROCMEM_N) -role $(PROCMEM_ROLE) $(PROCMEM_ARGS)

# A shorter walk-through: zerodrop's writes on first start and on restart.
demo: deps
	$(GO) run ./hack/demo

clean:
	rm -rf bin
