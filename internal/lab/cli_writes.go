package lab

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/worlds/azurewrites"
)

// The command's side of the Azure counting-writes world (--provider
// azure-emulator without traffic): its flags checked, its runs made by the
// world's package, its table printed (cli_writes_table.go).

// runAzureWrites is `zerodrop lab --provider azure-emulator …` with the
// counting-writes scenarios, after flag parsing.
func runAzureWrites(ctx context.Context, f flags, stdout, stderr io.Writer) int {
	opts, ok := f.azureWritesOptions(stderr)
	if !ok {
		return 2
	}
	results, err := azurewrites.ExecuteAzure(ctx, opts)
	writeAzureTable(stdout, results)
	return report.Finish(stderr, results, err, f.jsonPath)
}

// azureWritesOptions checks the flags of the counting-writes world and
// turns them into its options; false: a usage error, reported on stderr.
func (f flags) azureWritesOptions(stderr io.Writer) (azurewrites.AzureOptions, bool) {
	const prov = azurewrites.ProviderAzureEmulator
	if f.faultRate < 0 || f.faultRate >= 1 {
		fmt.Fprintf(stderr, "zerodrop lab: --azure-fault-rate %v (--provider %s): want a share from 0 to below 1\n", f.faultRate, prov)
		return azurewrites.AzureOptions{}, false
	}
	if f.ccmLBs != azurewrites.CCMSingleLB && f.ccmLBs != azurewrites.CCMMultipleLBs {
		fmt.Fprintf(stderr, "zerodrop lab: --azure-ccm-lbs %q (--provider %s): want %s or %s\n", f.ccmLBs, prov, azurewrites.CCMSingleLB, azurewrites.CCMMultipleLBs)
		return azurewrites.AzureOptions{}, false
	}
	if f.idleChange != "" && !slices.Contains(azurewrites.IdleChanges, f.idleChange) {
		fmt.Fprintf(stderr, "zerodrop lab: --azure-idle-change %q (--provider %s): want one of %s\n", f.idleChange, prov, strings.Join(azurewrites.IdleChanges, ", "))
		return azurewrites.AzureOptions{}, false
	}
	opts := f.azureWritesDefaults(stderr)
	var ok bool
	if opts.Scenarios, ok = f.azureWritesScenarios(stderr); !ok {
		return azurewrites.AzureOptions{}, false
	}
	for _, m := range strings.Split(f.mode, ",") {
		switch m = strings.TrimSpace(m); {
		case m == "all":
			opts.Modes = append(opts.Modes, azurewrites.Modes...)
		case slices.Contains(azurewrites.Modes, report.Mode(m)):
			opts.Modes = append(opts.Modes, report.Mode(m))
		default:
			fmt.Fprintf(stderr, "zerodrop lab: --provider %s runs the modes %s and %s (or all), not %q\n",
				prov, report.ModeUpstream, report.ModeZerodrop, m)
			return azurewrites.AzureOptions{}, false
		}
	}
	if f.htmlPath != "" {
		fmt.Fprintf(stderr, "zerodrop lab: --html draws traffic timelines; --provider %s has no traffic\n", prov)
		return azurewrites.AzureOptions{}, false
	}
	return opts, true
}

// azureWritesDefaults are the world's options the flags set, before any
// check (--dry-run says them).
func (f flags) azureWritesDefaults(progress io.Writer) azurewrites.AzureOptions {
	return azurewrites.AzureOptions{Progress: progress, FaultRate: f.faultRate, Kills: f.chaos.MidPlanKills, IdleRestarts: f.idleRestarts,
		CCMLoadBalancers: f.ccmLBs, IdleChange: f.idleChange}
}

// azureWritesScenarios are the scenarios --scenario names in the
// counting-writes world ("all": every one of them); false: one it does not
// run, reported on stderr.
func (f flags) azureWritesScenarios(stderr io.Writer) ([]string, bool) {
	var out []string
	for _, name := range strings.Split(f.scenario, ",") {
		switch name = strings.TrimSpace(name); {
		case name == "all":
			out = append(out, azurewrites.AzureScenarios...)
		case slices.Contains(azurewrites.AzureScenarios, name):
			out = append(out, name)
		default:
			fmt.Fprintf(stderr, "zerodrop lab: --provider %s runs the scenarios %s, not %q\n", azurewrites.ProviderAzureEmulator,
				strings.Join(azurewrites.AzureScenarios, ", "), name)
			return nil, false
		}
	}
	return out, true
}

// dryRunAzure is --dry-run with --provider azure-emulator's counting-writes
// scenarios: the scenarios it names are checked against the world's, and
// the world's options said; its other flags are checked when it starts.
func dryRunAzure(f flags, stdout, stderr io.Writer) int {
	if _, ok := f.azureWritesScenarios(stderr); !ok {
		return 2
	}
	fmt.Fprintf(stdout, "zerodrop lab --dry-run: the lab on the Azure emulator would run --scenario %s --mode %s, starting nothing now\n", f.scenario, f.mode)
	if v, err := azurewrites.Variant(f.azureWritesDefaults(io.Discard)); err == nil {
		fmt.Fprintf(stdout, "world: emulated Azure counting writes, options: %s\n", v)
	}
	return 0
}
