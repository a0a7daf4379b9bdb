package lab

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/scenarios"
	"zerodrop.dev/zerodrop/internal/lab/worlds/aws"
)

// ProviderAWSEmulator is the --provider value of the world of emulated
// AWS (package worlds/aws).
const ProviderAWSEmulator = "aws-emulator"

// AWSScenarios are the scenarios `zerodrop lab --provider aws-emulator`
// runs: the rollouts, drain-node (a cordon changes no target: the CCM's
// node set ignores it, so the drained node's target stays registered and,
// with Local, turns unhealthy when its last pod goes), restart-idle
// (leader changes with nothing changed) and maintenance, node removal
// (with --maintenance-signal exclude-label: DeregisterTargets, then
// draining).
var AWSScenarios = []string{"rollout", "rollout-local", "drain-node", "restart-idle", "maintenance"}

// AWSModes are the modes it runs: the real cloud-provider-aws with the
// typical workload, with the recipe, and with zerodrop's gates beside it
// (gate-only: zerodrop reads the NLB, never writes it).
var AWSModes = []report.Mode{report.ModeUpstream, report.ModeRecipe, report.ModeGates}

// AWSRecipe is the recipe as the EKS Best Practices Guide gives it
// (Load Balancing, "Availability and Pod Lifecycle": a preStop hook that
// delays SIGTERM, "a simple Exec handler such as `sleep 10`", the grace
// period long enough for cleanup — Kubernetes' default 30 s — readiness
// probes and a PodDisruptionBudget, which the recipe mode has; no
// minReadySeconds). Its readiness gates are the AWS Load Balancer
// Controller's, not the CCM's. The recipe flags, given, replace it.
var AWSRecipe = scenarios.Recipe{PreStopSleep: 10 * time.Second, GracePeriod: 30 * time.Second}

// awsFlags are the flags of the world of emulated AWS.
type awsFlags struct {
	registrationDelay, propagation time.Duration
	// assumed is --aws-assumed-propagation, unset: --aws-propagation.
	assumed     optionalDuration
	healthCheck aws.HealthCheck
}

func (af *awsFlags) declare(fs *flag.FlagSet) {
	fs.DurationVar(&af.registrationDelay, "aws-registration-delay", awsapi.DefaultRegistrationDelay, "with --provider "+ProviderAWSEmulator+
		": how long a registered target stays in Elb.RegistrationInProgress before its health checks start (a field report, not documented by AWS; 0: none)")
	fs.DurationVar(&af.propagation, "aws-propagation", awsapi.DefaultPropagation, "with --provider "+ProviderAWSEmulator+
		": how long the NLB's data plane lags its target states: new connections still reach a target that long after it left service (a field report, aws/containers-roadmap#470; 0: none)")
	fs.Var(&af.assumed, "aws-assumed-propagation", "with --provider "+ProviderAWSEmulator+
		" and --mode gates: zerodrop's --aws-propagation, the lag its termination gate assumes (default: --aws-propagation, the emulator's); set apart, a sweep of --aws-propagation shows where the gate's bound ends")
	fs.DurationVar(&af.healthCheck.Interval, "aws-health-check-interval", 0, "with --provider "+ProviderAWSEmulator+
		": the workload's NLB health-check interval, asked of the CCM through the Service's healthcheck-interval annotation (whole seconds, 5s to 300s; the timeout annotation the CCM's 10s, cut to the interval); 0: the CCM's (Local 10s, Cluster 30s)")
	fs.IntVar(&af.healthCheck.Thresholds, "aws-health-check-thresholds", 0, "with --provider "+ProviderAWSEmulator+
		": the workload's NLB healthy and unhealthy thresholds, asked of the CCM through the Service's annotations (2 to 10); 0: the CCM's (Local 2, Cluster 3)")
}

// optionalDuration is a duration flag that knows whether it was given.
type optionalDuration struct {
	d   time.Duration
	set bool
}

func (o *optionalDuration) String() string {
	if o == nil || !o.set {
		return ""
	}
	return o.d.String()
}

func (o *optionalDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	o.d, o.set = d, true
	return nil
}

// or is the duration given, else def.
func (o optionalDuration) or(def time.Duration) time.Duration {
	if o.set {
		return o.d
	}
	return def
}

// awsWorld checks the flags of the lab on emulated AWS, gives opts the
// AWS recipe unless a recipe flag was given, and returns the world; false:
// a usage error, reported on stderr.
func (f flags) awsWorld(opts *scenarios.Options, stderr io.Writer) (*aws.World, bool) {
	var bad string
	for _, name := range opts.Scenarios {
		if !slices.Contains(AWSScenarios, name) {
			bad = fmt.Sprintf("--provider %s runs %s, not %s", ProviderAWSEmulator, strings.Join(AWSScenarios, ", "), name)
		}
	}
	for _, m := range opts.Modes {
		if !slices.Contains(AWSModes, m) {
			bad = fmt.Sprintf("--provider %s runs the modes upstream, recipe and gates (the real cloud-provider-aws writing), not %s", ProviderAWSEmulator, m)
		}
	}
	switch {
	case bad != "":
	case f.aws.registrationDelay < 0 || f.aws.propagation < 0 || f.aws.assumed.or(0) < 0:
		bad = "--aws-registration-delay, --aws-propagation and --aws-assumed-propagation: want 0 or more"
	case f.aws.healthCheck.Validate() != nil:
		bad = "--aws-health-check-interval, --aws-health-check-thresholds: " + f.aws.healthCheck.Validate().Error()
	case f.dataPlane != 0 || f.fromChart:
		bad = fmt.Sprintf("--data-plane-replicas and --from-chart are the HAProxy data plane's, not --provider %s's", ProviderAWSEmulator)
	}
	if bad != "" {
		fmt.Fprintf(stderr, "zerodrop lab: %s\n", bad)
		return nil, false
	}
	if !f.recipeGiven {
		opts.Recipe = AWSRecipe
	}
	o := aws.Options{RegistrationDelay: f.aws.registrationDelay, Propagation: f.aws.propagation,
		AssumedPropagation: f.aws.assumed.or(f.aws.propagation), HealthCheck: f.aws.healthCheck}
	if !f.dryRun {
		bin, err := ccm.AWSBinary("")
		if err != nil {
			fmt.Fprintf(stderr, "zerodrop lab: %v\n", err)
			return nil, false
		}
		o.CCMBinary = bin
	}
	return aws.New(o), true
}

// writeAWSFigures prints, after the table, what the world of emulated AWS
// counted in each run's act from the emulator's record.
func writeAWSFigures(w io.Writer, results []report.Result) {
	for _, r := range results {
		a := r.AWS
		if a == nil {
			continue
		}
		name := r.Scenario + " " + r.ExternalTrafficPolicy + " " + r.Mode
		fmt.Fprintf(w, "%s: writes %s, %d reads, refused %s, %d CCM sync errors, %d instance-metadata connections; %s (cloud-provider-aws %s), registration delay %gs, propagation %gs, deregistration delay %gs\n",
			name, ops(a.Writes), a.Reads, ops(a.Refused), a.SyncErrors, a.MetadataConnections, a.LoadBalancer, a.CCMRelease,
			a.RegistrationDelaySeconds, a.PropagationSeconds, a.DeregistrationDelaySeconds)
		if z := a.Zerodrop; z != nil {
			fmt.Fprintf(w, "%s: zerodrop's calls: writes %s, reads %s, refused %s\n", name, ops(z.Writes), ops(z.Reads), ops(z.Refused))
		}
		if h := a.HealthCheckResets; h != nil {
			fmt.Fprintf(w, "%s: health-check resets: %d targets turned unhealthy, %d failed requests and %d broken WebSockets ended by them\n",
				name, h.Unhealthy, h.Requests, h.LongConns)
		}
		for i, s := range a.Stops {
			fmt.Fprintf(w, "%s: stop %d (%s): writes %s\n", name, i+1, s, ops(a.WritesPerStop[i]))
		}
	}
}

// ops is a count by operation or code, sorted by name: "none" when empty.
func ops(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
