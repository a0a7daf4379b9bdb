package aws

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// The world's own figures of a run's act (world.Measurer), from the
// emulator's record: the accepted writes by operation, the reads, the
// refused calls by code; per stop of the writer (world.RestartObserver),
// the writes by operation from that stop to the next; the CCM's failed
// syncs in its log and any call its metadata client made; in gates mode,
// the gates' bound at the run's clocks (bound.go). The CCM signs
// with the emulator's first key, zerodrop's gates with its second
// (controller.go): zerodrop's calls are counted apart, and any that is
// not a Describe fails the run.

var (
	_ world.Measurer        = (*run)(nil)
	_ world.RestartObserver = (*run)(nil)
)

// actRecord is where the act's stretch of the record starts, its stops,
// and where each CCM log ended then.
type actRecord struct {
	mark   int
	stops  []stopAt
	logs   map[string]int64
	resets resetWatch // resets.go
}

// stopAt is one stop of the writer: its signal's name and where the
// record stood when it was sent.
type stopAt struct {
	name string
	mark int
}

// ActStart waits for the writer to go quiet and starts the act's stretch
// of the record.
func (a *run) ActStart(ctx context.Context) error {
	settleRecord(ctx, a.emu)
	_, a.act.mark = a.emu.Calls(0)
	a.act.logs = map[string]int64{}
	for _, c := range a.ccm {
		if fi, err := os.Stat(ccm.LogPath(a.env.Dir, c.name)); err == nil {
			a.act.logs[c.name] = fi.Size()
		}
	}
	a.act.resets.watch(a.workloadTargets)
	return nil
}

// Stopping starts the stretch of the record of stop i.
func (a *run) Stopping(_ int, stop string) {
	_, mark := a.emu.Calls(0)
	a.act.stops = append(a.act.stops, stopAt{name: stop, mark: mark})
}

// ActEnd waits for the writer to go quiet and adds the act's figures to
// res; a call of the CCM's metadata client, or one of zerodrop's that is
// not a Describe, fails the run.
func (a *run) ActEnd(ctx context.Context, res *report.Result) error {
	onsets := a.act.resets.end()
	settleRecord(ctx, a.emu)
	calls, end := a.emu.Calls(a.act.mark)
	o := a.w.opts
	fig := &report.AWSFigures{CCMRelease: ccm.AWSVersion(),
		RegistrationDelaySeconds: o.RegistrationDelay.Seconds(), PropagationSeconds: o.Propagation.Seconds(),
		DeregistrationDelaySeconds: awsapi.DefaultDeregistrationDelay.Seconds(),
		MetadataConnections:        a.imds.conns.Load()}
	fig.Writes, fig.Reads, fig.Refused = countCalls(byCaller(calls, awsapi.AccessKeyID))
	zd := callsOf(byCaller(calls, awsapi.SecondAccessKeyID))
	if a.env.Mode == report.ModeGates {
		fig.Zerodrop = &zd
	}
	if start, err := time.Parse(time.RFC3339Nano, res.TrafficStart); err == nil && res.Timeline != nil {
		r := healthCheckResets(onsets, start, res.Timeline.Failures)
		fig.HealthCheckResets = &r
	}
	svc, err := a.env.CP.Client.CoreV1().Services(a.svc.Namespace).Get(ctx, a.svc.Name, metav1.GetOptions{})
	if err == nil && len(svc.Status.LoadBalancer.Ingress) > 0 {
		fig.LoadBalancer = svc.Status.LoadBalancer.Ingress[0].Hostname
	}
	if a.env.Mode == report.ModeGates {
		// The bound at the run's clocks (bound.go); a run without one says
		// why, and its figures stand.
		if err == nil {
			fig.GatesBound, err = a.gatesBound(ctx, svc)
		}
		if err != nil {
			a.env.Progressf("%s: no gates' bound on AWS for this run: %v", a.env.Name, err)
		}
	}
	for _, s := range stretches(a.act.mark, end, a.act.stops) {
		w, _, _ := countCalls(byCaller(calls[s.from:s.to], awsapi.AccessKeyID))
		fig.Stops = append(fig.Stops, s.name)
		fig.WritesPerStop = append(fig.WritesPerStop, w)
	}
	for _, c := range a.ccm {
		fig.SyncErrors += countSince(ccm.LogPath(a.env.Dir, c.name), a.act.logs[c.name], "Error syncing load balancer")
	}
	res.AWS = fig
	if fig.MetadataConnections > 0 {
		return fmt.Errorf("the CCM's instance-metadata client made %d connections: it must make none", fig.MetadataConnections)
	}
	if len(zd.Writes) > 0 {
		return fmt.Errorf("zerodrop called %v on AWS: gate-only must only read", zd.Writes)
	}
	return nil
}

// byCaller is the calls signed with the access key id.
func byCaller(calls []awsapi.Call, id string) []awsapi.Call {
	var out []awsapi.Call
	for _, c := range calls {
		if c.Caller == id {
			out = append(out, c)
		}
	}
	return out
}

// callsOf counts one client's calls: every call other than Describe*
// (accepted or refused: gate-only must not even try) and the Describe
// calls by operation, the refused ones by code.
func callsOf(calls []awsapi.Call) report.AWSCalls {
	out := report.AWSCalls{Writes: map[string]int{}, Reads: map[string]int{}}
	for _, c := range calls {
		if strings.HasPrefix(c.Operation, "Describe") {
			out.Reads[c.Operation]++
		} else {
			out.Writes[c.Operation]++
		}
		if c.Error != "" {
			if out.Refused == nil {
				out.Refused = map[string]int{}
			}
			out.Refused[c.Error]++
		}
	}
	return out
}

// countCalls counts a stretch of the record: accepted writes by
// operation, reads, refused calls by error code.
func countCalls(calls []awsapi.Call) (writes map[string]int, reads int, refused map[string]int) {
	writes = awsapi.WritesByOperation(calls)
	for _, c := range calls {
		switch {
		case c.Error != "":
			if refused == nil {
				refused = map[string]int{}
			}
			refused[c.Error]++
		case !c.Write():
			reads++
		}
	}
	return writes, reads, refused
}

// stretch is the part of the act's calls (indexes into them) from one
// stop to the next.
type stretch struct {
	name     string
	from, to int
}

// stretches cuts the act's calls — the record from mark to end — at its
// stops: each stop's stretch runs to the next stop, the last to end.
func stretches(mark, end int, stops []stopAt) []stretch {
	clamp := func(i int) int { return min(max(i-mark, 0), end-mark) }
	var out []stretch
	for i, s := range stops {
		next := end
		if i+1 < len(stops) {
			next = stops[i+1].mark
		}
		from, to := clamp(s.mark), clamp(next)
		out = append(out, stretch{name: s.name, from: from, to: max(from, to)})
	}
	return out
}

// countSince counts the lines containing s written to the file at path
// after its first from bytes.
func countSince(path string, from int64, s string) int {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < from {
		return 0
	}
	return strings.Count(string(b[from:]), s)
}

// recordIdle is how long the record must stay without a call for the
// writer to count as quiet; recordSettleLimit bounds the wait (a writer
// that never goes quiet is measured as it is rather than hang the lab).
const (
	recordIdle        = time.Second
	recordSettleLimit = 30 * time.Second
)

// settleRecord waits until the emulator has recorded no call for
// recordIdle, at most recordSettleLimit.
func settleRecord(ctx context.Context, emu *awsapi.Emulator) {
	_, last := emu.Calls(0)
	since, end := time.Now(), time.Now().Add(recordSettleLimit)
	for time.Since(since) < recordIdle && ctx.Err() == nil && time.Now().Before(end) {
		time.Sleep(50 * time.Millisecond)
		if _, n := emu.Calls(0); n != last {
			last, since = n, time.Now()
		}
	}
}
