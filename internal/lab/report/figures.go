package report

import "time"

// Mode is how the load balancer is run.
type Mode string

// The modes.
const (
	// ModeUpstream runs the real service controller of k8s.io/cloud-provider
	// (internal/lab/upstream) in cloud-controller-manager processes of its
	// own (two replicas, leader election with that component's defaults),
	// with a cloud that programs HAProxy as cloud-provider-azure programs a
	// Standard Load Balancer: node-backed, every node in the pool, Azure's
	// probes. The Service has no loadBalancerClass (the upstream controller
	// skips those); the workload is the typical one: a readiness probe, no
	// preStop hook, Deployment defaults, no PDB.
	ModeUpstream Mode = "upstream"
	// ModeRecipe is the same controller with the workload following the
	// published recipe (Recipe): a preStop sleep, a longer grace period,
	// minReadySeconds, maxUnavailable 0 / maxSurge 1 and a PDB.
	ModeRecipe Mode = "recipe"
	// ModeZerodrop runs zerodrop installed from the chart (--from-chart,
	// package worlds/chart), or zerodrop's controller as the lab arranges it: two `zerodrop controller` replicas with
	// leader election and otherwise default flags, on the run's HAProxy or
	// (--data-plane-replicas) in the control role over a data plane of
	// replicas, as pods of the lab, the webhook in the lab process, and
	// pods with the readiness gate and drain hook from the real webhook, a
	// PDB and maxUnavailable 0.
	ModeZerodrop Mode = "zerodrop"
	// ModeGates (emulated Azure only) keeps the upstream writer, the real
	// cloud-controller-manager, and adds zerodrop's gates for the
	// Service (zerodrop.dev/gate-only): zerodrop's controller pods read
	// the CCM's load balancer and write nothing; the workload has
	// zerodrop's rollout settings and PDB.
	ModeGates Mode = "gates"
)

// KnownModes are every mode --mode takes: AllModes and, on emulated Azure
// only, gates.
var KnownModes = []Mode{ModeUpstream, ModeRecipe, ModeZerodrop, ModeGates}

// AllModes are the modes in the order `--mode all` runs them.
var AllModes = []Mode{ModeUpstream, ModeRecipe, ModeZerodrop}

// nodeBacked reports whether the mode's load balancer always sends to
// node IP:nodePort (the upstream controller's clouds do): --backend is
// zerodrop's.
func (m Mode) NodeBacked() bool { return m == ModeUpstream || m == ModeRecipe || m == ModeGates }

// Gated reports whether zerodrop's gates and controller pods run in the
// mode: zerodrop's own, or only the gates beside the cloud's writer.
func (m Mode) Gated() bool { return m == ModeZerodrop || m == ModeGates }

// marker is an event on a scenario's timeline.
type Marker struct {
	At    time.Duration `json:"at"`
	Label string        `json:"label"`
}

// ChaosFigures are a chaos scenario's own figures.
type ChaosFigures struct {
	// Kills is how often kill-mid-plan SIGKILLed the writer, KillVerbs the
	// write command that landed as it was killed (the rest of that plan
	// never did), Rollouts how many rolling updates it took to get them.
	Kills     int      `json:"kills,omitempty"`
	KillVerbs []string `json:"kill_verbs,omitempty"`
	Rollouts  int      `json:"rollouts,omitempty"`
	// OutageSeconds is how long apiserver-down kept kube-apiserver stopped;
	// WritesDuringOutage the writes that landed at HAProxy meanwhile,
	// WritesAfterRecovery those from its return until the controllers had
	// a ready leader and idleVerify more (nothing changed: both should be
	// 0); PoolChanges the 250 ms samples during the outage whose backends
	// (address, port, state) differed from before it; LeaderExited whether
	// the leader's process ended after losing its lease.
	OutageSeconds       float64 `json:"outage_seconds,omitempty"`
	WritesDuringOutage  int64   `json:"writes_during_outage"`
	WritesAfterRecovery int64   `json:"writes_after_recovery"`
	PoolChanges         int     `json:"pool_changes_during_outage"`
	LeaderExited        bool    `json:"leader_exited,omitempty"`
}

// ReplicaFigures are lb-replica-restart's figures by phase: the requests
// that failed (late ones included, but not those the lab client's own
// stalled timer started late: the run's requests_late_client_stall counts those) and
// the long connections that broke from
// the phase's start until the workload was steady after it (no failure for
// 5 s: a failure is counted when its request ends).
type ReplicaFigures struct {
	RestartFailed int64 `json:"process_restarts_failed_requests"`
	RestartBroken int64 `json:"process_restarts_broken_long_conns"`
	ReplaceFailed int64 `json:"replacement_failed_requests"`
	ReplaceBroken int64 `json:"replacement_broken_long_conns"`
	HardFailed    int64 `json:"hard_failure_failed_requests"`
	HardBroken    int64 `json:"hard_failure_broken_long_conns"`
	// HardDetectSeconds is how long the killed replica's route stayed
	// announced (hardDetect).
	HardDetectSeconds float64 `json:"hard_failure_detect_seconds"`
}

// AzureFigures are the emulator lab's own figures, in the JSON report under
// "azure" next to the contract's fields (provider_writes: PUTs,
// provider_conflicts: 412s).
type AzureFigures struct {
	LBPuts             int `json:"lb_puts"`
	PoolPuts           int `json:"pool_puts"`
	Gets               int `json:"gets"`
	PreconditionFailed int `json:"precondition_failed"`
	// WritesChanged counts the writes (PUTs, DELETEs) that changed a stored
	// document: a write of what was already there changes nothing.
	WritesChanged int `json:"writes_changed"`
	// ConflictsRetried are conflicts the controllers re-read, re-planned and
	// retried; ConflictsSurfaced the Warning Events (one per Service on the
	// load balancer) that named a conflict.
	ConflictsRetried  int64 `json:"conflicts_retried"`
	ConflictsSurfaced int64 `json:"conflicts_surfaced"`
	// Faults is how many faults the emulator injected (--azure-fault-rate:
	// 412s through a foreign write, 429s, 500s, slow requests);
	// WarningEvents every Warning Event the controllers recorded.
	Faults        int   `json:"faults_injected"`
	WarningEvents int64 `json:"warning_events"`
	// Conflicts are 409 answers; Superseded the writes whose long-running
	// operation a later write to the same load balancer superseded
	// (CanceledAndSupersededDueToAnotherOperation).
	Conflicts  int `json:"conflicts_409"`
	Superseded int `json:"superseded"`
	// ErrorLogLines (churn) are the lines of severity error the writer's
	// processes logged.
	ErrorLogLines int `json:"error_log_lines"`
	// Changes made to Services and EndpointSlices (churn), or restarts.
	Changes  int `json:"changes"`
	Restarts int `json:"restarts"`
	// restart-idle, per restart: how the writer was stopped (SIGKILL,
	// SIGTERM), and of the writes that followed, those that changed
	// something, the backend addresses they removed from a pool and their
	// changes to a probe or a load-balancing rule.
	Stops                      []string `json:"stops,omitempty"`
	ChangedPerRestart          []int    `json:"changed_per_restart,omitempty"`
	RemovedBackendsPerRestart  []int    `json:"removed_backends_per_restart,omitempty"`
	ProbeRuleChangesPerRestart []int    `json:"probe_rule_changes_per_restart,omitempty"`
	// CCMLoadBalancers is upstream's load-balancer layout (single,
	// multiple) where the real cloud-provider-azure ran; IdleChange what
	// restart-idle changed while the writer was down, if anything.
	CCMLoadBalancers string `json:"ccm_load_balancers,omitempty"`
	IdleChange       string `json:"idle_change,omitempty"`
	// CCMRelease is the release of cloud-provider-azure that ran, and
	// ControlPlane the Kubernetes release of the lab's control plane, where
	// the real CCM wrote (the version skew between them is the run's).
	CCMRelease   string `json:"ccm_release,omitempty"`
	ControlPlane string `json:"control_plane,omitempty"`
	// WriteDiffs are the act's writes that changed a stored document, each
	// with what it changed (a body diff), in the order they landed.
	WriteDiffs []WriteDiff `json:"write_diffs,omitempty"`
	// Writers (shared-lb): each writer's figures on the load balancer they
	// share.
	Writers []WriterFigures `json:"writers,omitempty"`
}

// WriteDiff is one write that changed a stored document: the stop of the
// writer it followed (1 for the first; 0 before any), the call (who, what,
// which resource, the answer) and the leaves it changed, at most
// MaxWriteDiffLines of them ("+ path = value", "- path = value",
// "~ path: old -> new"), with Omitted the ones left out.
type WriteDiff struct {
	AfterStop int      `json:"after_stop"`
	Call      string   `json:"call"`
	Changes   []string `json:"changes"`
	Omitted   int      `json:"omitted,omitempty"`
}

// MaxWriteDiffLines bounds a WriteDiff's Changes: a pool PUT that adds
// thirty Services' addresses says enough in its first lines.
const MaxWriteDiffLines = 40

// WriterFigures are one writer's figures on a shared load balancer.
type WriterFigures struct {
	Writer string `json:"writer"`
	// Writes are its PUTs and DELETEs; PreconditionFailed and Conflicts
	// its 412 and 409 answers; Superseded its writes whose operation a
	// later write superseded.
	Writes, PreconditionFailed, Conflicts, Superseded int
	WarningEvents                                     int64 `json:"warning_events"`
	// RemovedOthers names every child of the other writer (rule, probe,
	// pool, frontend) one of its writes removed.
	RemovedOthers []string `json:"removed_others,omitempty"`
}

// Backend states as HAProxy shows them (and the HTML report draws them).
const (
	StateUp      = "UP"
	StateDown    = "DOWN"
	StateDrain   = "DRAIN"
	StateMaint   = "MAINT"
	StateRemoved = "removed"
)

// stateSpan is a backend's state from At on (until the next span).
type stateSpan struct {
	At    time.Duration
	State string
}

// backendLane is one backend of the Service's first port over a run.
type BackendLane struct {
	Backend string // address:port
	Spans   []stateSpan
}

func (l *BackendLane) Add(at time.Duration, state string) {
	if n := len(l.Spans); n == 0 || l.Spans[n-1].State != state {
		l.Spans = append(l.Spans, stateSpan{At: at, State: state})
	}
}
