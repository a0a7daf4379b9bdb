package dataplane

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
)

// routePoll is the recorder's period. Polling, not `ip -ts monitor`:
// frr-resilient changes an address's next hops by replacing its nexthop
// group in place, which the monitor reports as a nexthop event apart from
// the route, so its stream would have to be folded back into routes and
// groups — what NextHops already does from a full read, the same read
// the run's steady check and the BGP tests make. 200 ms is the period
// at which the resilient programmer itself follows bgpd, so a change is
// placed on the time axis within about that, at two ip commands a read.
const routePoll = 200 * time.Millisecond

// routeRecorder records the router's next hops for the run's addresses
// (its pool) from the data plane's start until stopped.
type routeRecorder struct {
	stop context.CancelFunc
	done chan struct{}

	mu  sync.Mutex
	log report.RouteLog
}

// startRouteRecorder polls the router's kernel (namespace ns) for the
// routes inside pool every routePoll until ctx ends or Stop; a failed read
// is logged once per run of failures and leaves the last read standing
// (no change is made up from it).
func startRouteRecorder(ctx context.Context, ns string, pool netip.Prefix, logf func(string, ...any)) *routeRecorder {
	ctx, stop := context.WithCancel(ctx)
	r := &routeRecorder{stop: stop, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		failing := false
		for {
			hops, err := NextHops(ctx, ns, pool)
			at := time.Now()
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				if !failing {
					logf("router routes: read %s: %v", ns, err)
				}
				failing = true
			default:
				failing = false
				r.mu.Lock()
				r.log.Read(at, hops)
				r.mu.Unlock()
			}
			if !traffic.SleepCtx(ctx, routePoll) {
				return
			}
		}
	}()
	return r
}

// Stop ends the polling and waits for it.
func (r *routeRecorder) Stop() {
	r.stop()
	<-r.done
}

// changes are the changes so far, with offsets from start.
func (r *routeRecorder) changes(start time.Time) []report.RouteChange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.From(start)
}

// startRouteRecorder starts, behind FRR, the recording of the router's
// next hops for the run's pool until runCtx ends or Stop (Plane.Stop).
func (p *Plane) startRouteRecorder(runCtx context.Context) {
	pool := netip.MustParsePrefix(cluster.FrontendPool(p.cfg.RunID))
	rec := startRouteRecorder(runCtx, p.cfg.FRR.host.Name, pool, func(format string, args ...any) {
		p.cfg.Logf("%s: %s", p.cfg.Name, fmt.Sprintf(format, args...))
	})
	p.routeMu.Lock()
	p.routeRec = rec
	p.routeMu.Unlock()
}

// recorder is the run's route recorder; nil with the stand-in.
func (p *Plane) recorder() *routeRecorder {
	p.routeMu.Lock()
	defer p.routeMu.Unlock()
	return p.routeRec
}

// stopRouteRecorder stops the recording, if any.
func (p *Plane) stopRouteRecorder() {
	if rec := p.recorder(); rec != nil {
		rec.Stop()
	}
}

// ActStart: nothing; the routes are recorded from the data plane's start
// (world.Measurer).
func (b *RunBase) ActStart(context.Context) error { return nil }

// ActEnd puts the router's changes of next hops, behind FRR, in res and
// on its timeline, their offsets from the traffic's start (world.Measurer).
func (b *RunBase) ActEnd(_ context.Context, res *report.Result) error {
	rec := b.Plane.recorder()
	if rec == nil {
		return nil
	}
	start, err := time.Parse(time.RFC3339Nano, res.TrafficStart)
	if err != nil {
		return fmt.Errorf("router routes: the traffic's start %q: %w", res.TrafficStart, err)
	}
	res.RouterRoutes = rec.changes(start)
	if res.Timeline != nil {
		res.Timeline.Routes = res.RouterRoutes
	}
	return nil
}
