package bgp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// TestSpeakerWithFRR drives the speaker against a real router, FRR, and
// checks every property through the router's own view (its kernel routes,
// their changes as ip monitor prints them, and bgpd's neighbor and prefix
// state):
//
//	a. three addresses announced are three routes via the node; announcing
//	   one again sends no UPDATE; the router's own route stays out of the
//	   speaker's table;
//	b. a hundred other addresses announced and withdrawn one by one never
//	   change the first address's route (no kernel change, the same bgpd
//	   version) nor reset the session (established and dropped counters);
//	c. StopForRestart (no NOTIFICATION) and a successor within the restart
//	   time: no kernel change to the three routes from the stop until the
//	   successor's paths replaced the stale ones;
//	d. Stop sends a NOTIFICATION and the routes go.
func TestSpeakerWithFRR(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := startFRR(t, ctx)

	logFile, err := os.Create(filepath.Join(r.dir, "speaker.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() })
	cfg := Config{
		ASN:           nodeASN,
		SourceAddress: r.node,
		Peers:         []Peer{{Address: r.addr, ASN: routerASN, Password: md5Secret}},
		HoldTime:      9 * time.Second,
		ConnectRetry:  time.Second,
		// Far longer than a hand-over takes on a loaded machine (2-3 s).
		GracefulRestart: GracefulRestart{Enabled: true, RestartTime: 30 * time.Second},
		Logger:          slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	addr := func(i int) netip.Prefix { return netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}), 32) }
	first := []netip.Prefix{addr(1), addr(2), addr(3)}

	sp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = sp.Stop(context.Background())
		}
	})
	if err := sp.Start(ctx); err != nil {
		t.Fatal(err)
	}

	// a. Three addresses: three routes via the node.
	for _, p := range first {
		if err := sp.Announce(p); err != nil {
			t.Fatal(err)
		}
	}
	want := route{Gateway: r.node.String(), Dev: r.link + "r"}
	r.waitFor(t, ctx, "the three routes", func() (bool, error) {
		rs, err := r.routes(ctx)
		if err == nil && !hasAll(rs, first, want) {
			err = fmt.Errorf("routes %v", rs)
		}
		return err == nil, err
	})
	// The router's own route reaches the speaker, which keeps it out of
	// its table: it originates only, and never relays a router's routes.
	r.waitFor(t, ctx, "the router's route at the speaker", func() (bool, error) {
		in, err := speakerTable(sp, api.TableType_TABLE_TYPE_ADJ_IN, r.addr.String())
		return err == nil && slices.Contains(in, routerPrefix), err
	})
	if rib, err := speakerTable(sp, api.TableType_TABLE_TYPE_GLOBAL, ""); err != nil || !slices.Equal(rib, first) {
		t.Errorf("speaker's table: %v (%v), want only its own %v", rib, err, first)
	}
	n0, err := r.neighbor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n0.State != "Established" || n0.Established != 1 {
		t.Fatalf("session after a: %+v, want Established once", n0)
	}
	// Announcing an announced address is one path: no UPDATE. The next
	// address's UPDATE is the barrier after which the count is read.
	if err := sp.Announce(first[0]); err != nil {
		t.Fatal(err)
	}
	if err := sp.Withdraw(addr(250)); err != nil { // never announced
		t.Fatal(err)
	}
	churn(t, ctx, r, sp, addr(4), want, true)
	n1, err := r.neighbor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := n1.Messages.UpdatesRecv - n0.Messages.UpdatesRecv; got != 2 {
		t.Errorf("UPDATEs for announcing an announced address, then one address in and out: %d, want 2", got)
	}

	// b. A hundred others, one by one, while the first address's route is
	// watched.
	rs, err := r.routes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	watched := rs[first[0]]
	// bgpd bumps a prefix's version on any change to its paths, even one
	// undone between two reads of the kernel table.
	e0, err := r.ribEntry(ctx, first[0])
	if err != nil {
		t.Fatal(err)
	}
	events := r.monitorRoutes(t, ctx)
	stopWatch := watch(ctx, r, 50*time.Millisecond, func(rs map[netip.Prefix]route) error {
		if got, ok := rs[first[0]]; !ok || got != watched {
			return fmt.Errorf("route to %s is %+v (present %t), was %+v", first[0], got, ok, watched)
		}
		return nil
	})
	start := time.Now()
	for i := 101; i <= 200; i++ {
		// The router handles one peer's UPDATEs in order, so the next
		// address's route appearing means this one's withdrawal was
		// handled; all are checked gone after the loop.
		churn(t, ctx, r, sp, addr(i), want, false)
	}
	r.waitFor(t, ctx, "no route to the hundred", func() (bool, error) {
		rs, err := r.routes(ctx)
		return err == nil && len(rs) == len(first), err
	})
	polls, err := stopWatch()
	if err != nil {
		t.Errorf("during the churn: %v", err)
	}
	changes := events.stop(t, ctx)
	for _, line := range changes {
		if mentions(line, first[0].Addr()) {
			t.Errorf("during the churn the router's kernel changed %s's route: %s", first[0], line)
		}
	}
	if e, err := r.ribEntry(ctx, first[0]); err != nil || e != e0 {
		t.Errorf("bgpd's entry for %s after the churn: %+v (%v), before: %+v", first[0], e, err, e0)
	}
	n2, err := r.neighbor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n2.State != "Established" || n2.Established != n0.Established || n2.Dropped != n0.Dropped {
		t.Errorf("session after 100 addresses in and out: %s, established %d dropped %d; before: established %d dropped %d",
			n2.State, n2.Established, n2.Dropped, n0.Established, n0.Dropped)
	}
	t.Logf("b: 100 addresses in and out in %s; %d kernel route changes, first route's entry read %d times",
		time.Since(start).Round(time.Millisecond), len(changes), polls)

	// c. Graceful-restart hand-over: the routes never leave the router's
	// table and keep their next hop, from the old speaker's stop until the
	// router holds the successor's paths (not stale ones) after its
	// End-of-RIB, and for a while after that.
	before, err := r.routes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	events = r.monitorRoutes(t, ctx)
	stopWatch = watch(ctx, r, 100*time.Millisecond, func(rs map[netip.Prefix]route) error {
		for _, p := range first {
			if got, ok := rs[p]; !ok || got != before[p] {
				return fmt.Errorf("route to %s is %+v (present %t), was %+v", p, got, ok, before[p])
			}
		}
		return nil
	})
	start = time.Now()
	stopped = true
	if err := sp.StopForRestart(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := cfg
	restarted.GracefulRestart.Restarting = true
	sp, err = New(restarted)
	if err != nil {
		t.Fatal(err)
	}
	stopped = false
	if err := sp.Set(first); err != nil {
		t.Fatal(err)
	}
	if err := sp.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, ctx, "the successor's session and fresh paths", func() (bool, error) {
		n, err := r.neighbor(ctx)
		if err != nil || n.State != "Established" || n.Established != n0.Established+1 {
			return false, err
		}
		for _, p := range first {
			e, err := r.ribEntry(ctx, p)
			if err != nil || e.Paths != 1 || e.Stale != 0 {
				return false, err
			}
		}
		return true, nil
	})
	handover := time.Since(start)
	n3, err := r.neighbor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n3.Messages.NotificationsRecv != n0.Messages.NotificationsRecv {
		t.Errorf("StopForRestart sent a NOTIFICATION (router's last reset: %q)", n3.LastReset)
	}
	// Stale paths not re-announced would go at the End-of-RIB; give zebra
	// time to have removed them from the kernel.
	time.Sleep(time.Second)
	polls, err = stopWatch()
	if err != nil {
		t.Errorf("during the hand-over: %v", err)
	}
	changes = events.stop(t, ctx)
	for _, line := range changes {
		for _, p := range first {
			if mentions(line, p.Addr()) {
				t.Errorf("during the hand-over the router's kernel changed %s's route: %s", p, line)
			}
		}
	}
	t.Logf("c: hand-over (stop to the successor's fresh paths) in %s; kernel route changes %q, routes read %d times",
		handover.Round(time.Millisecond), changes, polls)

	// d. The node leaving: a Cease NOTIFICATION (so no restart timer keeps
	// the routes) and the routes gone.
	stopped = true
	if err := sp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	r.waitFor(t, ctx, "the routes withdrawn", func() (bool, error) {
		rs, err := r.routes(ctx)
		return err == nil && len(rs) == 0, err
	})
	took := time.Since(start)
	n4, err := r.neighbor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// (FRR 8.4 counts one received NOTIFICATION twice; its log shows one.)
	if n4.Messages.NotificationsRecv == n3.Messages.NotificationsRecv || n4.LastReset != "BGP Notification received" {
		t.Errorf("Stop sent no NOTIFICATION: router's last reset %q", n4.LastReset)
	}
	t.Logf("d: routes withdrawn in %s; router's last reset: %q", took.Round(time.Millisecond), n4.LastReset)
}

// churn announces p, waits for its route, withdraws it and, if waitGone,
// waits for the route to go.
func churn(t *testing.T, ctx context.Context, r *frrRouter, sp *Speaker, p netip.Prefix, want route, waitGone bool) {
	t.Helper()
	if err := sp.Announce(p); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, ctx, "route to "+p.String(), func() (bool, error) {
		rs, err := r.routes(ctx)
		return err == nil && hasAll(rs, []netip.Prefix{p}, want), err
	})
	if err := sp.Withdraw(p); err != nil {
		t.Fatal(err)
	}
	if !waitGone {
		return
	}
	r.waitFor(t, ctx, "no route to "+p.String(), func() (bool, error) {
		rs, err := r.routes(ctx)
		_, ok := rs[p]
		return err == nil && !ok, err
	})
}

func hasAll(rs map[netip.Prefix]route, ps []netip.Prefix, want route) bool {
	for _, p := range ps {
		got, ok := rs[p]
		if !ok || got.Gateway != want.Gateway || got.Dev != want.Dev {
			return false
		}
	}
	return true
}

// watch reads the router's routes every interval and checks them until the
// returned stop is called; stop returns how many reads there were and the
// first failed check (or read).
func watch(ctx context.Context, r *frrRouter, interval time.Duration, check func(map[netip.Prefix]route) error) (stop func() (int, error)) {
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg    sync.WaitGroup
		polls int
		first error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			rs, err := r.routes(ctx)
			if ctx.Err() != nil {
				return
			}
			polls++
			if err == nil {
				err = check(rs)
			}
			if err != nil && first == nil {
				first = fmt.Errorf("read %d (%s): %w", polls, time.Now().Format("15:04:05.000"), err)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() (int, error) {
		cancel()
		wg.Wait()
		return polls, first
	}
}

// speakerTable lists the prefixes in one of the speaker's GoBGP tables.
func speakerTable(sp *Speaker, table api.TableType, name string) ([]netip.Prefix, error) {
	sp.mu.Lock()
	srv := sp.srv
	sp.mu.Unlock()
	var ps []netip.Prefix
	err := srv.ListPath(apiutil.ListPathRequest{TableType: table, Name: name, Family: bgp.RF_IPv4_UC},
		func(nlri bgp.NLRI, _ []*apiutil.Path) {
			if p, err := netip.ParsePrefix(nlri.String()); err == nil {
				ps = append(ps, p)
			}
		})
	slices.SortFunc(ps, netip.Prefix.Compare)
	return ps, err
}
