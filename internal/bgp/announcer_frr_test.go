package bgp

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestAnnouncerWithFRR runs the announcer and the speaker against a real
// router (FRR): two Service addresses on the node's side of the link, each
// with a real TCP listener; both are announced; one listener closed, that
// address alone is withdrawn (after FallCount failed checks) while the
// other's route stays; reopened, it is announced again; the node leaving
// withdraws both.
func TestAnnouncerWithFRR(t *testing.T) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := startFRR(t, ctx)

	// The addresses live on the test's veth end, which the reaper deletes
	// with the namespace: local to the "node" (the root namespace), as a
	// data-plane node's Service addresses are on its lo.
	flap, steady := netip.MustParseAddr("203.0.113.77"), netip.MustParseAddr("203.0.113.78")
	for _, a := range []netip.Addr{flap, steady} {
		if out, err := exec.CommandContext(ctx, "ip", "addr", "add", a.String()+"/32", "dev", r.link).CombinedOutput(); err != nil {
			t.Fatalf("ip addr add %s: %v: %s", a, err, out)
		}
	}
	listen := func(a netip.Addr, port int) net.Listener {
		t.Helper()
		ln, err := net.Listen("tcp", net.JoinHostPort(a.String(), strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	flapLn := listen(flap, 0)
	port := flapLn.Addr().(*net.TCPAddr).Port
	steadyLn := listen(steady, 0)
	defer steadyLn.Close()

	logFile, err := os.Create(filepath.Join(r.dir, "speaker.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() })
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sp, err := New(Config{
		ASN:             nodeASN,
		SourceAddress:   r.node,
		Peers:           []Peer{{Address: r.addr, ASN: routerASN, Password: md5Secret}},
		HoldTime:        9 * time.Second,
		ConnectRetry:    time.Second,
		GracefulRestart: GracefulRestart{Enabled: true, RestartTime: 30 * time.Second},
		Logger:          log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sp.Stop(context.Background()) })
	var leaving atomic.Bool
	const interval, fall = 200 * time.Millisecond, 3
	an, err := NewAnnouncer(AnnouncerConfig{
		Speaker: sp,
		Candidates: StaticCandidates{
			{Address: flap, Ports: []uint16{uint16(port)}},
			{Address: steady, Ports: []uint16{uint16(steadyLn.Addr().(*net.TCPAddr).Port)}},
		},
		Leaving:  leaving.Load,
		Interval: interval,
		Rules:    Rules{FallCount: fall},
		Logger:   log,
	})
	if err != nil {
		t.Fatal(err)
	}
	// As the command does: one round before Start, so the first UPDATEs
	// carry what the node serves.
	if err := an.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sp.Start(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); an.Run(runCtx) }()
	defer func() { stopRun(); <-done }()

	pf, ps := netip.PrefixFrom(flap, 32), netip.PrefixFrom(steady, 32)
	want := route{Gateway: r.node.String(), Dev: r.link + "r"}
	routed := func(desc string, in, out []netip.Prefix) time.Duration {
		t.Helper()
		start := time.Now()
		r.waitFor(t, ctx, desc, func() (bool, error) {
			rs, err := r.routes(ctx)
			if err != nil || !hasAll(rs, in, want) {
				return false, err
			}
			for _, p := range out {
				if _, ok := rs[p]; ok {
					return false, nil
				}
			}
			return true, nil
		})
		return time.Since(start)
	}
	routed("both addresses announced", []netip.Prefix{pf, ps}, nil)
	n0, err := r.neighbor(ctx)
	if err != nil {
		t.Fatal(err)
	}

	e0, err := r.ribEntry(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	flapLn.Close()
	took := routed("the closed listener's address withdrawn, the other kept", []netip.Prefix{ps}, []netip.Prefix{pf})
	t.Logf("withdrawn %s after the listener closed (FallCount×Interval = %s)", took.Round(time.Millisecond), fall*interval)
	// bgpd's entry for the steady address never changed (its version is
	// bumped on any change): the withdrawal touched one path.
	if e, err := r.ribEntry(ctx, ps); err != nil || e != e0 {
		t.Errorf("steady address's entry: %+v (%v), before: %+v", e, err, e0)
	}

	flapLn = listen(flap, port)
	defer flapLn.Close()
	took = routed("the reopened listener's address announced", []netip.Prefix{pf, ps}, nil)
	t.Logf("announced again %s after the listener reopened", took.Round(time.Millisecond))

	leaving.Store(true)
	took = routed("both withdrawn when the node leaves", nil, []netip.Prefix{pf, ps})
	t.Logf("withdrawn %s after leaving", took.Round(time.Millisecond))

	n1, err := r.neighbor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n1.State != "Established" || n1.Established != n0.Established || n1.Dropped != n0.Dropped {
		t.Errorf("session after the withdrawals: %+v, before %+v (withdrawing must not reset it)", n1, n0)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("test's own elapsed time %s; load average %s", time.Since(began).Round(time.Millisecond), load)
}
