package report

import (
	"fmt"
	"time"

	"zerodrop.dev/zerodrop/internal/drain"
)

// The published bounds of docs/azure.md ("Traffic through emulated Azure:
// the gate's bound" and "The gates' bound"), evaluated at a run's clocks, so
// the report says at which points a mode must lose nothing and where the
// bound promises nothing. The constants are the defaults the bounds are
// stated with.
const (
	// boundSettle (S) is zerodrop's termination settle: two probe
	// intervals of its default probe.
	boundSettle = 10 * time.Second
	// boundShutdown (B) is the drain's shutdown budget.
	boundShutdown = drain.DefaultShutdownBudget
	// boundQueue (W) bounds the time from a pod's deletion to ARM accepting
	// zerodrop's Down for it with nothing else queued.
	boundQueue = time.Second
	// boundKubeProxy (K) bounds kube-proxy's sync after an endpoint
	// changes (its minimum sync period, 1 s by default).
	boundKubeProxy = time.Second
	// The CCM's probe (cloud-provider-azure's defaults): every boundProbe,
	// boundThreshold failures take a node out.
	boundProbe     = 5 * time.Second
	boundThreshold = 2
)

// Promise is what the published bound says of a mode at a run's clocks:
// Holds when the mode must lose nothing there, and Why, the formula with
// the run's values. Modes without a bound (upstream, recipe) have none.
type Promise struct {
	Holds bool   `json:"holds"`
	Why   string `json:"why"`
}

// PromiseAt evaluates mode's bound at clock; nil for a mode without one.
func PromiseAt(mode Mode, c AzureClock) *Promise {
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	l, p, g := sec(c.ARMLatencySeconds), sec(c.LBPropagationSeconds), sec(c.GraceSeconds)
	budget := g - drain.ShutdownBudgetOf(g, boundShutdown)
	switch mode {
	case ModeZerodrop:
		// Termination holds when P < S and W + L + S ≤ G − B.
		wls := boundQueue + l + boundSettle
		switch {
		case p >= boundSettle:
			return &Promise{false, fmt.Sprintf("P = %s ≥ S = %s", p, boundSettle)}
		case wls > budget:
			return &Promise{false, fmt.Sprintf("W + L + S = %s > G − B = %s", wls, budget)}
		}
		return &Promise{true, fmt.Sprintf("P = %s < S = %s and W + L + S = %s ≤ G − B = %s", p, boundSettle, wls, budget)}
	case ModeGates:
		// The CCM writes nothing in these scenarios; the data plane takes
		// the last endpoint's node out within K + T·I of its deletion.
		out := boundKubeProxy + boundThreshold*boundProbe
		if out > budget {
			return &Promise{false, fmt.Sprintf("K + T·I = %s > G − B = %s", out, budget)}
		}
		return &Promise{true, fmt.Sprintf("K + T·I = %s ≤ G − B = %s, whatever L, P and H", out, budget)}
	}
	return nil
}
