package awsdp

import (
	"context"
	"strings"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/supervisor"
	"zerodrop.dev/zerodrop/internal/testutil/netlabtest"
)

// TestDataPlane runs one NLB through AWS's behaviours in turn: new
// connections to the healthy targets, an unhealthy target's connections
// reset, a deregistered target's connection kept through its draining and
// after while it gets no new ones, fail-open, the idle timeout, Close. The
// subtests depend on each other's state, as a load balancer's life does.
func TestDataPlane(t *testing.T) {
	w := newWorld(t)
	before := nsState(t, w)
	w.createNLB(t)
	dp := w.start(t, 30*time.Second)
	fe := w.frontend(t, dp)
	n1, n2, n3 := w.targets[0], w.targets[1], w.targets[2]

	t.Run("new connections go to healthy targets", func(t *testing.T) {
		waitTargets(t, dp, fe, "i-1:healthy+", "i-2:healthy+", "i-3:healthy+")
		// DNAT to the node's address and node port, the client's address
		// kept (an instance target group preserves it).
		c := connTo(t, w.cli, fe, "i-2")
		line, _ := c.Get()
		c.Close()
		if want := "local=" + n2.host.IP.String() + ":30080 remote=" + w.cli.IP.String() + ":"; !strings.Contains(line, want) {
			t.Errorf("the target saw %q, want %q", line, want)
		}
		if got := spread(t, w.cli, fe, 30); got[""] > 0 || got["i-1"] == 0 || got["i-2"] == 0 || got["i-3"] == 0 {
			t.Errorf("30 new connections answered by %v, want every one answered and every target used", got)
		}
	})

	t.Run("an unhealthy target's connections are reset", func(t *testing.T) {
		open := connTo(t, w.cli, fe, "i-2")
		defer open.Close()
		n2.healthy.Store(false)
		waitTargets(t, dp, fe, "i-1:healthy+", "i-2:unhealthy!", "i-3:healthy+")
		if line, err := open.Get(); err == nil || !strings.Contains(err.Error(), "reset") {
			t.Errorf("the connection open on i-2 after it turned unhealthy: %q, %v; want a reset", line, err)
		}
		// The NLB forgot the flow it reset: the same 4-tuple again is a
		// new flow to a healthy target, not a reset (conntrack.go).
		again, err := netlabtest.DialFrom(w.cli, open.LocalPort(), feAddr(fe))
		if err != nil {
			t.Errorf("a new connection from the reset one's source port: %v; want it balanced to a healthy target", err)
		} else {
			line, err := again.Get()
			again.Close()
			if err != nil || strings.HasPrefix(line, "i-2 ") {
				t.Errorf("a new connection from the reset one's source port answered %q, %v; want a healthy target", line, err)
			}
		}
		if got := spread(t, w.cli, fe, 30); got["i-2"] > 0 || got[""] > 0 {
			t.Errorf("i-2 unhealthy: 30 new connections answered by %v, want none by i-2 and none failed", got)
		}
	})
	n2.healthy.Store(true)
	waitTargets(t, dp, fe, "i-1:healthy+", "i-2:healthy+", "i-3:healthy+")

	t.Run("a deregistered target keeps its connection and gets no new ones", func(t *testing.T) {
		open := connTo(t, w.cli, fe, "i-3")
		defer open.Close()
		w.deregister(t, n3)
		written := time.Now()
		// For the propagation time it still takes new connections:
		// counted from a quarter of it (the data plane reads the
		// emulator every poll, so a data plane without the lag has
		// stopped by then) to a half. A slow machine makes fewer tries;
		// too few say nothing.
		time.Sleep(propagation/4 - time.Since(written))
		tries, landed := 0, 0
		for time.Since(written) < propagation/2 {
			tries++
			if c, err := dial(w.cli, fe, time.Second); err == nil {
				if line, err := c.Get(); err == nil && strings.HasPrefix(line, "i-3 ") {
					landed++
				}
				c.Close()
			}
		}
		if tries >= 20 && landed == 0 {
			t.Errorf("i-3 took none of %d new connections %v to %v after its deregistration, want some until the propagation time %v", tries, propagation/4, propagation/2, propagation)
		}
		waitTargets(t, dp, fe, "i-1:healthy+", "i-2:healthy+", "i-3:draining")
		if since := time.Since(written); since < propagation {
			t.Errorf("i-3 stopped receiving %v after its deregistration, before the propagation time %v", since, propagation)
		}
		if got := spread(t, w.cli, fe, 30); got["i-3"] > 0 || got[""] > 0 {
			t.Errorf("i-3 draining: 30 new connections answered by %v, want none by i-3", got)
		}
		if line, err := open.Get(); err != nil || !strings.HasPrefix(line, "i-3 ") {
			t.Errorf("draining, the connection open on i-3: %q, %v; want it still answered by i-3", line, err)
		}
		// Its draining over, the target leaves the group; its connection
		// lives on until the idle timeout.
		waitTargets(t, dp, fe, "i-1:healthy+", "i-2:healthy+")
		if line, err := open.Get(); err != nil || !strings.HasPrefix(line, "i-3 ") {
			t.Errorf("deregistered, the connection open on i-3: %q, %v; want it still answered by i-3", line, err)
		}
	})

	t.Run("every target unhealthy: fail open", func(t *testing.T) {
		n1.healthy.Store(false)
		n2.healthy.Store(false)
		waitTargets(t, dp, fe, "i-1:unhealthy+", "i-2:unhealthy+")
		if got := spread(t, w.cli, fe, 30); got[""] > 0 || got["i-1"] == 0 || got["i-2"] == 0 {
			t.Errorf("every target unhealthy: 30 new connections answered by %v, want every one answered by i-1 and i-2", got)
		}
	})
	n1.healthy.Store(true)
	n2.healthy.Store(true)
	waitTargets(t, dp, fe, "i-1:healthy+", "i-2:healthy+")

	t.Run("close leaves nothing", func(t *testing.T) {
		if err := dp.Close(); err != nil {
			t.Fatal(err)
		}
		if after := nsState(t, w); after != before {
			t.Errorf("namespace after Close:\n%s\nbefore New:\n%s", after, before)
		}
	})

	t.Run("idle timeout", func(t *testing.T) {
		const idle = 2 * time.Second
		dp := w.start(t, idle)
		fe := w.frontend(t, dp)
		waitTargets(t, dp, fe, "i-1:healthy+", "i-2:healthy+")
		busy, quiet := connTo(t, w.cli, fe, "i-1"), connTo(t, w.cli, fe, "i-1")
		defer busy.Close()
		defer quiet.Close()
		for end := time.Now().Add(2 * idle); time.Now().Before(end); time.Sleep(idle / 4) {
			if line, err := busy.Get(); err != nil || !strings.HasPrefix(line, "i-1 ") {
				t.Fatalf("a connection used every %v: %q, %v; want it kept on i-1", idle/4, line, err)
			}
		}
		// quiet has been idle twice the timeout: the data plane forgot it.
		if line, err := quiet.Get(); err == nil || !strings.Contains(err.Error(), "reset") {
			t.Errorf("a connection idle for %v with an idle timeout of %v: %q, %v; want a reset", 2*idle, idle, line, err)
		}
	})

	t.Run("failed setup leaves nothing", func(t *testing.T) {
		if err := w.lb.Run(context.Background(), "nft", "add table ip "+table); err != nil {
			t.Fatal(err)
		}
		want := nsState(t, w)
		if _, err := New(context.Background(), Config{NS: w.lb.Netns, Emulator: w.emu, Frontends: frontendPool}); err == nil {
			t.Fatal("New succeeded beside an existing table")
		}
		if got := nsState(t, w); got != want {
			t.Errorf("namespace after a failed New:\n%s\nwant:\n%s", got, want)
		}
	})
}

// nsState is what the data plane may change in lb's namespace: its
// ruleset, lo's addresses, its sysctls.
func nsState(t *testing.T, w *world) string {
	t.Helper()
	out, err := supervisor.Output(context.Background(), supervisor.Command{Name: "ip", Args: []string{"netns", "exec", w.lb.Name, "sh", "-c",
		"nft list ruleset; ip -o addr show dev lo; cd /proc/sys/net; cat ipv4/ip_forward ipv4/conf/all/send_redirects ipv4/conf/eth0/send_redirects " +
			"netfilter/nf_conntrack_tcp_be_liberal netfilter/nf_conntrack_tcp_timeout_established"}})
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
