package lab

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"zerodrop.dev/zerodrop/internal/lab/azurelab"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/scenarios"
)

// AzureTrafficScenarios are the scenarios `zerodrop lab --provider
// azure-emulator` runs with traffic through the emulated load balancer (the
// HAProxy lab's scenarios on emulated Azure); its other scenarios count ARM
// writes (package azurelab).
var AzureTrafficScenarios = []string{"rollout", "rollout-local", "scale-down", "drain-node"}

// azureTraffic reports whether --scenario names a traffic scenario.
func azureTraffic(scenario string) bool {
	for _, name := range strings.Split(scenario, ",") {
		if slices.Contains(AzureTrafficScenarios, strings.TrimSpace(name)) {
			return true
		}
	}
	return false
}

// azureOptions checks the flags of the traffic lab on emulated Azure and
// returns its clocks; false: a usage error, reported on stderr.
func (f flags) azureOptions(opts scenarios.Options, stderr io.Writer) (*scenarios.AzureOptions, bool) {
	for _, name := range opts.Scenarios {
		if !slices.Contains(AzureTrafficScenarios, name) {
			fmt.Fprintf(stderr, "zerodrop lab: --provider %s runs %s with traffic and %s without (ARM writes only), not both at once: %s is of the second kind\n",
				azurelab.ProviderAzureEmulator, strings.Join(AzureTrafficScenarios, ", "), strings.Join(azurelab.AzureScenarios, ", "), name)
			return nil, false
		}
	}
	if f.dataPlane != 0 || f.fromChart {
		fmt.Fprintf(stderr, "zerodrop lab: --data-plane-replicas and --from-chart are the HAProxy data plane's, not --provider %s's\n", azurelab.ProviderAzureEmulator)
		return nil, false
	}
	if f.armLatency < 0 || f.lbPropagation < 0 || f.healthLag < 0 {
		fmt.Fprintln(stderr, "zerodrop lab: --arm-latency, --lb-propagation and --health-lag are 0 or more")
		return nil, false
	}
	o := &scenarios.AzureOptions{ARMLatency: f.armLatency, LBPropagation: f.lbPropagation, HealthLag: f.healthLag}
	if !f.dryRun && (slices.Contains(opts.Modes, report.ModeUpstream) || slices.Contains(opts.Modes, report.ModeRecipe)) {
		bin, err := ccm.Binary()
		if err != nil {
			fmt.Fprintf(stderr, "zerodrop lab: %v\n", err)
			return nil, false
		}
		o.CCMBinary = bin
	}
	return o, true
}
