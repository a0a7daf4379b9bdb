package azuredp

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/supervisor"
)

// TestDataPlane runs one topology through Azure's behaviours in turn:
// traffic with floating IP on and off, a probe going down, every probe
// down, admin state Down, Close, a propagation delay, a failed setup. The
// subtests depend on each other's state, as a load balancer's life does.
func TestDataPlane(t *testing.T) {
	w := newWorld(t)
	before := nsState(t, w)
	w.putLB(t, w.lbDoc(w.backends, nil))
	dp := w.start(t, 0)
	b1, b2, b3 := w.backends[0], w.backends[1], w.backends[2]

	t.Run("forwards", func(t *testing.T) {
		w.waitEligible(t, dp, "fip", "b1", "b2", "b3")
		w.waitEligible(t, dp, "nat", "b1", "b2", "b3")
		// Floating IP: the backend receives the packet still addressed to
		// the frontend and port, from the client's own address.
		c := connTo(t, w.fipCli, fipPort, "b1")
		line, _ := c.Get()
		c.Close()
		if want := "local=" + vip + ":80 remote=" + w.fipCli.IP.String() + ":"; !strings.Contains(line, want) {
			t.Errorf("floating IP: backend saw %q, want %q", line, want)
		}
		// Without floating IP: DNAT to the backend's address and port, the
		// client's address kept.
		c = connTo(t, w.natCli, natPort, "b2")
		line, _ = c.Get()
		c.Close()
		if want := "local=" + b2.host.IP.String() + ":8080 remote=" + w.natCli.IP.String() + ":"; !strings.Contains(line, want) {
			t.Errorf("DNAT: backend saw %q, want %q", line, want)
		}
		for _, x := range []struct {
			cli  string
			port int
		}{{"fip", fipPort}, {"nat", natPort}} {
			cli := w.fipCli
			if x.cli == "nat" {
				cli = w.natCli
			}
			got := spread(t, cli, x.port, 30)
			if got[""] > 0 || got["b1"] == 0 || got["b2"] == 0 || got["b3"] == 0 {
				t.Errorf("%s: 30 new connections answered by %v, want every one answered and every backend used", x.cli, got)
			}
		}
	})

	t.Run("a reused 4-tuple is a new flow", func(t *testing.T) {
		// A client reuses its ports: a SYN from a 4-tuple whose last flow
		// went to a backend that no longer gets new flows must go, with
		// every later packet of the new flow, to a backend that does.
		// (The flows map kept the old choice: the SYN went to the new
		// backend, its ACK to the old one, which reset it.)
		port := 40000 + int(time.Now().UnixNano()%20000)
		first, err := dialFrom(w.fipCli, port, fipPort)
		if err != nil {
			t.Fatal(err)
		}
		line, err := first.Get()
		first.Reset()
		if err != nil {
			t.Fatal(err)
		}
		old := w.serverNamed(strings.Fields(line)[0])
		old.healthy.Store(false)
		defer func() {
			old.healthy.Store(true)
			w.waitEligible(t, dp, "fip", "b1", "b2", "b3")
		}()
		var others []string
		for _, b := range w.backends {
			if b != old {
				others = append(others, b.name)
			}
		}
		w.waitEligible(t, dp, "fip", others...)
		again, err := dialFrom(w.fipCli, port, fipPort)
		if err != nil {
			t.Fatalf("the same 4-tuple again: %v", err)
		}
		defer again.Reset()
		line, err = again.Get()
		if err != nil || strings.HasPrefix(line, old.name+" ") {
			t.Errorf("the same 4-tuple after %s left the rule: %q, %v; want an answer from another backend", old.name, line, err)
		}
	})

	t.Run("probe down stops new flows only", func(t *testing.T) {
		openF, openN := connTo(t, w.fipCli, fipPort, "b2"), connTo(t, w.natCli, natPort, "b2")
		defer openF.Close()
		defer openN.Close()
		b2.healthy.Store(false)
		w.waitEligible(t, dp, "fip", "b1", "b3")
		w.waitEligible(t, dp, "nat", "b1", "b3")
		for _, x := range []struct {
			name string
			cli  *conn
			port int
		}{{"fip", openF, fipPort}, {"nat", openN, natPort}} {
			cli := w.fipCli
			if x.name == "nat" {
				cli = w.natCli
			}
			if got := spread(t, cli, x.port, 30); got["b2"] > 0 || got[""] > 0 {
				t.Errorf("%s: with b2's probe down, 30 new connections answered by %v, want none by b2 and none failed", x.name, got)
			}
			if line, err := x.cli.Get(); err != nil || !strings.HasPrefix(line, "b2 ") {
				t.Errorf("%s: the connection open on b2: %q, %v; want it still answered by b2", x.name, line, err)
			}
		}

		t.Run("every probe down", func(t *testing.T) {
			b1.healthy.Store(false)
			b3.healthy.Store(false)
			w.waitEligible(t, dp, "fip")
			w.waitEligible(t, dp, "nat")
			if got := spreadWithin(t, w.fipCli, fipPort, 3, time.Second); got[""] != 3 {
				t.Errorf("fip: every probe down, new connections answered by %v, want none (AllProbedDown)", got)
			}
			if got := spreadWithin(t, w.natCli, natPort, 3, time.Second); got[""] != 3 {
				t.Errorf("nat: every probe down, new connections answered by %v, want none (AllProbedDown)", got)
			}
			for _, c := range []*conn{openF, openN} {
				if line, err := c.Get(); err != nil || !strings.HasPrefix(line, "b2 ") {
					t.Errorf("every probe down, the connection open on b2: %q, %v; want it still answered (Standard SKU)", line, err)
				}
			}
		})
	})

	for _, s := range w.backends {
		s.healthy.Store(true)
	}
	w.waitEligible(t, dp, "fip", "b1", "b2", "b3")

	t.Run("admin state Down", func(t *testing.T) {
		openF, openN := connTo(t, w.fipCli, fipPort, "b1"), connTo(t, w.natCli, natPort, "b1")
		defer openF.Close()
		defer openN.Close()
		w.putPool(t, w.backends, map[string]armnetwork.LoadBalancerBackendAddressAdminState{"b1": armnetwork.LoadBalancerBackendAddressAdminStateDown})
		w.waitEligible(t, dp, "fip", "b2", "b3")
		w.waitEligible(t, dp, "nat", "b2", "b3")
		if got := spread(t, w.fipCli, fipPort, 30); got["b1"] > 0 || got[""] > 0 {
			t.Errorf("fip: b1 admin Down, 30 new connections answered by %v, want none by b1", got)
		}
		if got := spread(t, w.natCli, natPort, 30); got["b1"] > 0 || got[""] > 0 {
			t.Errorf("nat: b1 admin Down, 30 new connections answered by %v, want none by b1", got)
		}
		for _, c := range []*conn{openF, openN} {
			if line, err := c.Get(); err != nil || !strings.HasPrefix(line, "b1 ") {
				t.Errorf("admin Down, the connection open on b1: %q, %v; want it still answered (TCP flows persist)", line, err)
			}
		}
		hs, err := dp.RuleHealth(rg, lbName, "fip")
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h.IPAddress == b1.host.IP.String() && (h.State != "Down" || !strings.Contains(h.Reason, "admin state Down")) {
				t.Errorf("rule health of b1: %+v, want Down for its admin state", h)
			}
		}
	})

	t.Run("close leaves nothing", func(t *testing.T) {
		if err := dp.Close(); err != nil {
			t.Fatal(err)
		}
		if after := nsState(t, w); after != before {
			t.Errorf("namespace after Close:\n%s\nbefore New:\n%s", after, before)
		}
	})

	t.Run("propagation", func(t *testing.T) {
		const propagation = 4 * time.Second
		dp := w.start(t, propagation)
		// What was stored before New is programmed at once: b1 admin Down.
		w.waitEligible(t, dp, "fip", "b2", "b3")
		w.putPool(t, []*server{b1, b2}, nil) // b1 back, b3 out
		written := time.Now()
		// Until the propagation delay has passed the old pool holds: no new
		// flow reaches b1 (admin Down there), b3 still gets some. A slow
		// machine only applies the change later, never earlier.
		old := map[string]int{}
		for time.Since(written) < propagation/2 {
			got := spread(t, w.fipCli, fipPort, 10)
			if got["b1"] > 0 {
				t.Fatalf("%s after the pool write: new connections answered by %v, want the old pool (b2, b3)", time.Since(written).Round(time.Millisecond), got)
			}
			for k, v := range got {
				old[k] += v
			}
		}
		if old["b3"] == 0 || old[""] > 0 {
			t.Errorf("before the propagation delay: new connections answered by %v, want b2 and b3", old)
		}
		w.waitEligible(t, dp, "fip", "b1", "b2")
		if got := spread(t, w.fipCli, fipPort, 30); got["b3"] > 0 || got["b1"] == 0 {
			t.Errorf("after propagation: new connections answered by %v, want b1 and b2 only", got)
		}
		if err := dp.Close(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("failed setup leaves nothing", func(t *testing.T) {
		// A table of the data plane's name already there: New fails at its
		// tables and must undo its sysctls and leave that table alone.
		if err := w.lb.Run(context.Background(), "nft", "add table netdev "+table); err != nil {
			t.Fatal(err)
		}
		want := nsState(t, w)
		if _, err := New(context.Background(), Config{NS: w.lb.Netns, Emulator: w.emu, ResourceGroup: rg}); err == nil {
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
	var b strings.Builder
	out, err := nsOutput(w, "nft", "list", "ruleset")
	if err != nil {
		t.Fatal(err)
	}
	b.Write(out)
	out, err = nsOutput(w, "sh", "-c",
		"ip -o addr show dev lo; cat /proc/sys/net/ipv4/ip_forward /proc/sys/net/ipv4/conf/all/send_redirects /proc/sys/net/ipv4/conf/eth0/send_redirects")
	if err != nil {
		t.Fatal(err)
	}
	b.Write(out)
	return b.String()
}

func nsOutput(w *world, args ...string) ([]byte, error) {
	return supervisor.Output(context.Background(), supervisor.Command{Name: "ip", Args: append([]string{"netns", "exec", w.lb.Name}, args...)})
}
