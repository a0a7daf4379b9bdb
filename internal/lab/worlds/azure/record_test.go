package azure

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/report"
)

// TestIsKlogError: the CCM's error log lines are klog's of severity E only.
func TestIsKlogError(t *testing.T) {
	for line, want := range map[string]bool{
		`E1127 05:17:53.073714    4354 controller.go:302] "Unhandled Error" err=<`: true,
		`I1127 05:17:53.073714    4354 controller.go:302] "Ensured load balancer"`: false,
		`W1127 05:17:53.073714    4354 azure.go:1] "slow"`:                         false,
		`Error: something`:        false,
		`E112 7`:                  false,
		`	get PLS: GET https://x`: false,
	} {
		if got := isKlogError(line); got != want {
			t.Errorf("isKlogError(%q) = %v, want %v", line, got, want)
		}
	}
}

// TestRecordFigures: writes are counted by kind and by what they changed,
// a removed backend address once per address, a probe or rule change per
// changed line, and a writer's removal of the other writer's child (not
// its own) is named.
func TestRecordFigures(t *testing.T) {
	calls := []azurearm.Call{
		{Client: "ccm-1", Method: http.MethodGet, Kind: "loadBalancer", Status: 200},
		{Client: "ccm-1", Method: http.MethodPut, Kind: "loadBalancer", Status: 200, Changes: []string{
			"- properties.loadBalancingRules[zd-a.b.tcp-80].name = zd-a.b.tcp-80",
			"~ properties.probes[p1].properties.intervalInSeconds: 5 -> 15",
		}},
		{Client: "zerodrop", Method: http.MethodPut, Kind: "backendAddressPool", Status: 200, Changes: []string{
			"- properties.loadBalancerBackendAddresses[a1].properties.ipAddress = 10.0.0.1",
			"- properties.loadBalancerBackendAddresses[a1].name = a1",
		}},
		{Client: "zerodrop", Method: http.MethodPut, Kind: "loadBalancer", Status: http.StatusPreconditionFailed},
		{Client: "zerodrop", Method: http.MethodPut, Kind: "loadBalancer", Status: 200, Changes: []string{
			"- properties.loadBalancingRules[zd-own].name = zd-own",
		}},
		{Client: "zerodrop", Method: http.MethodPut, Kind: "backendAddressPool", Resource: "rg/lb/pool", Status: 200},
	}
	f := figuresOf(calls)
	if f.writes != 5 || f.lbPuts != 3 || f.poolPuts != 2 || f.changed != 3 || f.gets != 1 || f.preconditionFailed != 1 {
		t.Errorf("figures %+v: want 5 writes (3 LB PUTs, 2 pool PUTs), 3 changed, 1 read, 1 412", f)
	}
	if len(f.rewrites) != 1 || f.rewrites[0].Resource != "rg/lb/pool" {
		t.Errorf("rewrites %v: want the accepted pool PUT that changed nothing (not the 412)", f.rewrites)
	}
	d := diffsOf(calls)
	if d.removedBackends != 1 || d.probeOrRule != 3 {
		t.Errorf("diffs %+v: want 1 backend removed, 3 probe or rule changes", d)
	}
	ws := writerFigures(calls)
	if len(ws) != 2 || ws[0].Writer != zerodropIdentity || ws[1].Writer != ccmWriter {
		t.Fatalf("writers %+v: want zerodrop, then the CCM", ws)
	}
	if len(ws[0].RemovedOthers) != 0 || !slices.Equal(ws[1].RemovedOthers, []string{"zd-a.b.tcp-80"}) {
		t.Errorf("removed of the other's: zerodrop %v, CCM %v; want none, and zerodrop's rule", ws[0].RemovedOthers, ws[1].RemovedOthers)
	}
}

// TestWriteDiffsOf: each write that changed a document is kept with the
// stop it followed and its changes, cut at report.MaxWriteDiffLines; reads,
// refused writes and writes that changed nothing are not.
func TestWriteDiffsOf(t *testing.T) {
	long := make([]string, report.MaxWriteDiffLines+3)
	for i := range long {
		long[i] = fmt.Sprintf("+ properties.x[%d] = 1", i)
	}
	pool := azurearm.Call{Method: http.MethodPut, Kind: "backendAddressPool", Resource: "rg/lb/pool", Status: http.StatusOK,
		Changes: []string{"- properties.loadBalancerBackendAddresses[node-1].properties.ipAddress = 10.0.0.1"}}
	calls := []azurearm.Call{
		{Method: http.MethodPut, Kind: "loadBalancer", Resource: "rg/lb", Status: http.StatusOK, Changes: long}, // before any stop
		{Method: http.MethodGet, Kind: "loadBalancer", Resource: "rg/lb", Status: http.StatusOK},
		{Method: http.MethodPut, Kind: "loadBalancer", Resource: "rg/lb", Status: http.StatusPreconditionFailed, Changes: []string{"+ x = 1"}},
		{Method: http.MethodPut, Kind: "loadBalancer", Resource: "rg/lb", Status: http.StatusOK}, // changed nothing
		pool, // after the second stop
	}
	// The act's stretch starts at record index 10; the stops were sent at
	// indexes 11 and 13.
	got := writeDiffsOf(calls, 10, []stopAt{{name: "SIGKILL", mark: 11}, {name: "SIGTERM", mark: 13}})
	if len(got) != 2 {
		t.Fatalf("writeDiffsOf = %d diffs, want 2: %+v", len(got), got)
	}
	if got[0].AfterStop != 0 || len(got[0].Changes) != report.MaxWriteDiffLines || got[0].Omitted != 3 {
		t.Errorf("first diff: after stop %d, %d changes, %d omitted; want 0, %d, 3", got[0].AfterStop, len(got[0].Changes), got[0].Omitted, report.MaxWriteDiffLines)
	}
	if got[1].AfterStop != 2 || !slices.Equal(got[1].Changes, pool.Changes) || got[1].Call != pool.String() {
		t.Errorf("second diff = %+v, want after stop 2 with the pool PUT's changes", got[1])
	}
}
