package main

// The gate wait (-gate-at, data-plane role): what an unrelated rollout's
// readiness gate waits for while a new replica builds. The gates count a
// replica as soon as its pod has an address (internal/dataplane's
// Discovery: its HAProxy may receive traffic), and a pod-backed gate opens
// only once every counted replica has the new pod's endpoint as a server
// whose checks pass (podgate's verdict: Registered and Healthy; the HAProxy
// provider's Backends: checks ran, server running). So a new replica that
// takes a minute to build holds every rollout in the cluster for a minute.
// procmem replaces one endpoint of a Service (as a rollout's step does: a
// new Pod at a new address in the EndpointSlice, the old one out) while
// the replica builds, and the same on another Service once it is built,
// and reports how long until the replica's HAProxy had each new endpoint
// Up: the first is the wait a building replica adds, the second the wait
// of the same step on a built one.

import (
	"context"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

var gateAt = flag.Duration("gate-at", time.Second, "with -role data-plane: this long after the replica's process starts, one Service's endpoint is replaced as a rollout's step does, and the time until the replica's HAProxy has the new endpoint Up (what an unrelated rollout's readiness gate waits for: the gates count a building replica) is reported beside the same step once the replica is built; negative: not measured (nor with -live=false: nothing would pass the checks)")

// gateWait is one measured step: when its endpoint was replaced (since the
// replica's process started) and when the new one was Up, since the step:
// after the start of the last read of HAProxy's state that did not see it
// Up (after), and before the end of the first that did (took). A read of
// every server at thousands of Services takes a while itself: read is the
// longest read's time.
type gateWait struct {
	service               int
	at, after, took, read time.Duration
	err                   error
}

// The fractions of the way through the -n where the gate-wait steps'
// Services are: one changed while the replica builds, one once built.
const gateBuilding, gateBuilt = 0.25, 0.75

// gateTarget is the Service a gate-wait step changes: the one nearest
// fraction of the way through the -n that HAProxy does not refuse
// (-refused, refusedService). Its checks run at the shipped interval
// (checkInterval), as a rollout's new pod's would.
func gateTarget(fraction float64) int {
	held := map[int]bool{}
	for k := 0; k < *refused; k++ {
		held[refusedService(k)] = true
	}
	i := spread(1, fraction)[0]
	for held[i] {
		i = (i + 1) % *services
	}
	return i
}

// isGateService says whether Service i is a gate-wait step's.
func isGateService(i int) bool {
	return *role == "data-plane" && *gateAt >= 0 && (i == gateTarget(gateBuilding) || i == gateTarget(gateBuilt))
}

// refusedService is the k-th Service of -refused: spread over the -n.
func refusedService(k int) int { return k * *services / *refused }

// measureGateWait replaces an endpoint of Service i at started + at (at
// once if that has passed) and waits until the replica's HAProxy (its
// admin socket in hdir) has the new endpoint Up, at most -timeout.
func measureGateWait(ctx context.Context, cl *cluster, p *process, hdir string, i int, started time.Time, at time.Duration) gateWait {
	w := gateWait{service: i}
	time.Sleep(time.Until(started.Add(at)))
	step := time.Now()
	w.at = step.Sub(started)
	k, err := cl.replaceEndpoint(ctx, i)
	if err != nil {
		w.err = err
		return w
	}
	for {
		if err := p.exited(); err != nil {
			w.err = err
			return w
		}
		began := time.Now()
		up, err := serverUp(ctx, hdir, k)
		w.read = max(w.read, time.Since(began))
		if err == nil && up {
			w.took = time.Since(step)
			return w
		}
		w.after = began.Sub(step)
		if time.Since(step) > *timeout {
			w.err = fmt.Errorf("endpoint %s of %s not Up in HAProxy after %s", endpointIP(k), name(i), *timeout)
			return w
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// serverUp says whether endpoint k is a server of HAProxy's (the admin
// socket of hdir) whose checks pass: `show stat` status UP after a check
// ran (not INI or UNK), as the HAProxy provider's Backends reads it for
// the gates (checks ran, server running).
// A read that fails (HAProxy reloading) is no answer, as for a gate.
func serverUp(ctx context.Context, hdir string, k int) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := haproxy.ReadStat(rctx, filepath.Join(hdir, "admin.sock"))
	if err != nil {
		return false, err
	}
	for _, r := range rows {
		if r.Name == "BACKEND" || r.IsFrontend() || r.Addr == "" {
			continue
		}
		host, _, err := net.SplitHostPort(r.Addr)
		ran := r.CheckStatus != "" && r.CheckStatus != "INI" && r.CheckStatus != "UNK"
		if err == nil && (host == endpointIP(k) || host == endpointLoopback(k)) && strings.HasPrefix(r.Status, "UP") && ran {
			return true, nil
		}
	}
	return false, nil
}

// gateLine is the report's line for a building replica's step and a built
// one's (ready: when the replica was ready, since its start).
func gateLine(building, built gateWait, ready time.Duration) string {
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	return fmt.Sprintf("gate wait: a rollout's step on %s %s after the replica started (ready after %s): its new endpoint Up in the building replica's HAProxy %s–%s after the step; the same step on %s once built: %s–%s (the longest read of HAProxy's servers took %s, %s)",
		name(building.service), r(building.at), r(ready), r(building.after), r(building.took),
		name(built.service), r(built.after), r(built.took), r(building.read), r(built.read))
}
