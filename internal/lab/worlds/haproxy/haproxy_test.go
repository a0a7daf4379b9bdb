package haproxy

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/upstream"
)

// TestCloudStartsItsOwnHAProxy: the baseline's HAProxy is started by the
// cloud's own code (upstream.StartHAProxy, not zerodrop's provider), answers
// on the admin socket with the cloud's empty configuration, and the cloud's
// writer then programs it (a reload through the master socket) and reads
// its backends back.
func TestCloudStartsItsOwnHAProxy(t *testing.T) {
	if _, err := exec.LookPath("haproxy"); err != nil {
		t.Skip("no haproxy")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	p, err := upstream.StartHAProxy(ctx, dir, "haproxy")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Stop(); err != nil {
			t.Log(err)
		}
	}()
	h := upstream.NewHAProxy(dir, "haproxy")
	if st, _, err := h.Read(); err != nil || len(st.LoadBalancers) != 0 {
		t.Fatalf("the cloud's configuration at start: %+v, %v; want its own, with no load balancer", st, err)
	}
	lb := upstream.LB{Name: "a1", Service: "ns/web", Address: "127.0.0.1",
		Rules: []upstream.Rule{{Name: "a1-TCP-18080", Port: 18080, BackendPort: 30080,
			Probe: upstream.Probe{Protocol: upstream.ProbeTCP, Port: 30080, IntervalSeconds: 5, Threshold: 2}}},
		Pool: []upstream.Member{{Node: "node-1", Address: "127.0.0.2"}}}
	wrote, err := h.Apply(ctx, upstream.State{LoadBalancers: []upstream.LB{lb}})
	if err != nil || !wrote {
		t.Fatalf("the cloud's first write: wrote %v, %v", wrote, err)
	}
	bs, err := upstream.ReadBackends(ctx, h.AdminSocket, "a1")
	if err != nil || len(bs) != 1 || bs[0].Address != "127.0.0.2" {
		t.Fatalf("backends after the write: %+v, %v; want node-1's", bs, err)
	}
}
