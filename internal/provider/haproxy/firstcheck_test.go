package haproxy

import (
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
)

// TestNoTrafficBeforeFirstPassingCheck: a backend added at run time gets no
// connection through the frontend while its health check fails, and gets
// traffic once the check passes. HAProxy 2.6 has no `init-state`: a server
// that leaves maintenance is UP until a check says otherwise.
func TestNoTrafficBeforeFirstPassingCheck(t *testing.T) {
	dir := t.TempDir()
	var c counter
	p := startOwned(t, dir, &c)
	stable := startBackends(t, 1, "127.0.3")

	// The new backend counts the requests it serves; its health check
	// (GET /healthz on the same port) answers 503 until healthy is set.
	var hits atomic.Int64
	var healthy atomic.Bool
	ln, err := net.Listen("tcp", "127.0.4.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fresh := model.Backend{Address: "127.0.4.1", Port: int32(ln.Addr().(*net.TCPAddr).Port), Weight: model.DefaultWeight, State: model.Active}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			if !healthy.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		}
		hits.Add(1)
		fmt.Fprint(w, fresh.ID())
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	const key, lbAddr = "default/checked", "127.0.0.53"
	port := freePort(t, lbAddr)
	probe := model.Probe{Kind: model.ProbeHTTP, Path: "/healthz", IntervalMillis: 300, Rise: 2, Fall: 2}
	desired := func(bs ...model.Backend) *model.LoadBalancer {
		return &model.LoadBalancer{Key: key, Listeners: []model.Listener{{
			Name: key + "/tcp-80", Address: lbAddr, Port: port, Protocol: model.TCP, Probe: probe, Backends: bs}}}
	}
	applyDiff(t, p, desired(stable[0].backend()))
	eventually(t, 30*time.Second, "the stable backend serving", func() error {
		_, err := get(lbAddr, port)
		return err
	})

	plan := applyDiff(t, p, desired(stable[0].backend(), fresh))
	if plan.Counts()[model.OpAddBackend] != 1 || plan.Create {
		t.Fatalf("plan %s, want one add-backend at run time", plan)
	}
	// Several check intervals with the check failing: every request must go
	// to the stable backend.
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		if _, err := get(lbAddr, port); err != nil {
			t.Fatalf("GET through HAProxy: %v", err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the new backend served %d requests before its first passing check", n)
	}
	healthy.Store(true)
	eventually(t, 30*time.Second, "the new backend serving once its check passes", func() error {
		if _, err := get(lbAddr, port); err != nil {
			return err
		}
		if hits.Load() == 0 {
			return fmt.Errorf("no request reached it yet")
		}
		return nil
	})

	// Drained, then enabled again (node mode, externalTrafficPolicy Local:
	// the node's last pod left, a new one starts there) while its check now
	// fails but has not failed `fall` times yet: enabling must not send it
	// traffic on the stale UP — it waits for a passing check again.
	drained := fresh
	drained.State = model.Draining
	applyDiff(t, p, desired(stable[0].backend(), drained))
	healthy.Store(false)
	before := hits.Load()
	applyDiff(t, p, desired(stable[0].backend(), fresh))
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		if _, err := get(lbAddr, port); err != nil {
			t.Fatalf("GET through HAProxy: %v", err)
		}
	}
	if n := hits.Load() - before; n != 0 {
		t.Fatalf("the backend enabled again served %d requests on its stale UP, before a passing check", n)
	}
}
