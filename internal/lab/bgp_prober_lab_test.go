package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// The hard failure's independent prober (issue 51): a namespace of the
// test's own on the lab's fabric, routed to the frontend range through
// the lab's router as the client is, that opens a new connection at a
// fixed rate. Its failure window is set beside the lab's: from the drop
// (the node's uplink made to drop every packet) to the first read of the
// router's kernel route without the node.

// proberIP is the prober's address on the fabric: in the lab's hosts'
// 198.18.1.0/24, above any host netlab numbers (it adds a handful).
var proberIP = netip.MustParseAddr("198.18.1.250")

// proberPeriod is the prober's connect rate, one every 20 ms: with one
// node in three failing, the chance that no connection meets it in
// windowTolerance is (2/3)^25, below one in ten thousand, at either end.
const proberPeriod = 20 * time.Millisecond

// windowTolerance is how far the prober's window may start and end from
// the lab's (issue 51's acceptance).
const windowTolerance = 500 * time.Millisecond

// openProber makes the prober's namespace, named after the lab's (so a
// dead run's is removed with the lab's by netlab.RemoveStale), with a veth
// on the fabric's bridge and a route to the frontend range through the
// router, redirects ignored as the client's; remove deletes it (and with it
// both ends of the veth).
func (l *leaveLab) openProber(ctx context.Context) (_ *netlab.Netns, _ func() error, err error) {
	prefix := strings.TrimSuffix(l.router, "-router")
	ns := &netlab.Netns{Name: prefix + "-prober"}
	routerIP, err := eth0Addr(ctx, l.router)
	if err != nil {
		return nil, nil, err
	}
	ip := func(args ...string) error {
		return supervisor.Run(ctx, supervisor.Command{Name: "ip", Args: args})
	}
	if err := ip("netns", "add", ns.Name); err != nil {
		return nil, nil, err
	}
	remove := func() error {
		return supervisor.Run(context.WithoutCancel(ctx), supervisor.Command{Name: "ip", Args: []string{"netns", "del", ns.Name}})
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, remove())
		}
	}()
	fabric := prefix + "-fabric"
	steps := [][]string{
		{"-n", fabric, "link", "add", "prober", "type", "veth", "peer", "name", "eth0", "netns", ns.Name},
		{"-n", fabric, "link", "set", "prober", "master", "br0"},
		{"-n", fabric, "link", "set", "prober", "up"},
		{"-n", ns.Name, "link", "set", "lo", "up"},
		{"-n", ns.Name, "addr", "add", netip.PrefixFrom(proberIP, 16).String(), "dev", "eth0"},
		{"-n", ns.Name, "link", "set", "eth0", "up"},
		{"-n", ns.Name, "route", "add", cluster.FrontendNet, "via", routerIP.String(), "dev", "eth0"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return nil, nil, fmt.Errorf("prober: %w", err)
		}
	}
	for _, key := range []string{"net.ipv4.conf.all.accept_redirects", "net.ipv4.conf.eth0.accept_redirects"} {
		if err := ns.SetSysctl(ctx, key, "0"); err != nil {
			return nil, nil, fmt.Errorf("prober: %w", err)
		}
	}
	return ns, remove, nil
}

// probe opens a new TCP connection to frontend from namespace ns every
// period (each given 1 s), until stop is called; stop waits for the
// attempts in flight, and attempts then holds them all, by start.
func probe(ctx context.Context, ns *netlab.Netns, frontend netip.AddrPort, period time.Duration) (stop func(), attempts *[]dataplane.Attempt) {
	var mu sync.Mutex
	var out []dataplane.Attempt
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-tick.C:
			}
			wg.Go(func() {
				start := time.Now()
				dctx, cancel := context.WithTimeout(context.WithoutCancel(pctx), time.Second)
				defer cancel()
				c, err := ns.DialContext(dctx, "tcp", frontend.String())
				if err == nil {
					_ = c.Close()
				}
				mu.Lock()
				out = append(out, dataplane.Attempt{Start: start, OK: err == nil})
				mu.Unlock()
			})
		}
	})
	return func() {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		slices.SortFunc(out, func(a, b dataplane.Attempt) int { return a.Start.Compare(b.Start) })
	}, &out
}

// checkWindow asserts that the prober's window w (offsets from the drop)
// starts within windowTolerance of the drop and ends within it of the
// router's change, which lies between after (the start of the last read
// that still held the node) and by (the end of the first that did not).
func checkWindow(t *testing.T, w dataplane.Window, after, by time.Duration) {
	t.Helper()
	if w.Failed == 0 {
		return // check reports a failure that was not seen
	}
	if w.First > windowTolerance {
		t.Errorf("the prober's first failed connect started %.2fs after the drop, want within %s", w.First.Seconds(), windowTolerance)
	}
	var d time.Duration // from the span [after, by]
	switch {
	case w.Last < after:
		d = after - w.Last
	case w.Last > by:
		d = w.Last - by
	}
	if d > windowTolerance {
		t.Errorf("the prober's last failed connect started %.2fs after the drop, the router's route lost the node between %.2fs and %.2fs: %.2fs apart, want within %s",
			w.Last.Seconds(), after.Seconds(), by.Seconds(), d.Seconds(), windowTolerance)
	}
}
