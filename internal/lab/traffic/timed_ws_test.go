package traffic

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestTimedWebSockets: a timed WebSocket that reaches its lifetime ends
// unbroken (the client's own close), one still open when its pod is
// killed is broken, and each knows the address the pod saw it come from.
func TestTimedWebSockets(t *testing.T) {
	srv, err := StartPodServer("pod-a", net.Listen, netip.MustParseAddr("127.0.0.1"), []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan []*TimedConn)
	go func() {
		done <- TimedWebSockets(ctx, nil, srv.lns[0].Addr().String(),
			[]time.Duration{2 * time.Second, 3 * time.Second, time.Hour}, 10*time.Millisecond, func() bool { return true })
	}()
	// All three open, then the two short ones end at their lifetimes.
	for _, want := range []int{3, 1} {
		testutil.Eventually(t, 30*time.Second, "WebSockets open at the pod", func() (bool, string) {
			srv.mu.Lock()
			defer srv.mu.Unlock()
			return len(srv.ws) == want, ""
		})
	}
	srv.Kill()
	conns := <-done
	if len(conns) != 3 {
		t.Fatalf("%d connections, want 3", len(conns))
	}
	for i, c := range conns {
		if want := i == 2; c.Broken != want {
			t.Errorf("connection %d (lifetime %s): broken %v (%s %s), want %v", i, c.Lifetime, c.Broken, c.Kind, c.Detail, want)
		}
		if host, _, err := net.SplitHostPort(c.Peer); err != nil || host != "127.0.0.1" {
			t.Errorf("connection %d: peer %q, want 127.0.0.1:port", i, c.Peer)
		}
	}
}
