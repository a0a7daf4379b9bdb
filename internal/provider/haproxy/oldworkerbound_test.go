package haproxy

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"zerodrop.dev/zerodrop/internal/model"
)

// startOwnedWith is startOwned with the old-worker bounds of bound.
func startOwnedWith(t *testing.T, dir string, bound Options) *Provider {
	t.Helper()
	opts := Options{Dir: dir, Log: testr.NewWithOptions(t, testr.Options{Verbosity: 1}), StopOnClose: true, ReloadTimeout: 20 * time.Second,
		MaxOldWorkers: bound.MaxOldWorkers, HardStopAfter: bound.HardStopAfter}
	p, err := New(testContext(t), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { stopAll(t, p) })
	return p
}

// TestOldWorkerBound: an old worker holding a long-lived connection lives
// until the connection ends, each holding a whole configuration. With
// MaxOldWorkers 1 (mworker-max-reloads 1) the second reload after the
// connection opened ends its worker and the connection with it, while a
// connection opened after the first reload (one reload old) stays; with
// HardStopAfter (2 s) the old worker ends that long after the reload. Without a
// bound both connections outlive the reloads.
func TestOldWorkerBound(t *testing.T) {
	for i, tc := range []struct {
		name  string
		bound Options
		// firstEnds: the connection opened before both reloads is ended
		// by the bound; secondEnds: the one opened between them is too.
		firstEnds, secondEnds bool
	}{
		{name: "no bound"},
		{name: "max old workers 1", bound: Options{MaxOldWorkers: 1}, firstEnds: true},
		{name: "hard stop after 2s", bound: Options{HardStopAfter: 2 * time.Second}, firstEnds: true, secondEnds: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			p := startOwnedWith(t, t.TempDir(), tc.bound)
			bs := startBackends(t, 1, fmt.Sprintf("127.0.%d", 49+i))
			const key = "ws/chat"
			lbAddr := fmt.Sprintf("127.0.0.%d", 80+i)
			a := listenerOf(key, "tcp-80", lbAddr, freePort(t, lbAddr), bs)
			desired := &model.LoadBalancer{Key: key, Listeners: []model.Listener{a}}
			applyDiff(t, p, desired)
			eventually(t, 30*time.Second, "the backend serving", func() error {
				_, err := get(lbAddr, a.Port)
				return err
			})

			// reload adds a listener: a frontend change, one reload.
			reload := func(n int) {
				t.Helper()
				desired.Listeners = append(desired.Listeners, listenerOf(key, fmt.Sprintf("tcp-%d", 81+n), lbAddr, freePort(t, lbAddr), bs))
				before := workerPID(t, p)
				applyDiff(t, p, desired)
				if after := workerPID(t, p); after == before {
					t.Fatalf("reload %d: the worker is still %d", n, before)
				}
			}
			first := openLongConn(t, lbAddr, a.Port, bs[0].id())
			w1 := workerPID(t, p)
			reload(1)
			if _, _, old, err := p.Procs(ctx); err != nil || !slices.Contains(old, w1) {
				t.Fatalf("after one reload: old workers %v (want %d among them), err %v", old, w1, err)
			}
			second := openLongConn(t, lbAddr, a.Port, bs[0].id())
			w2 := workerPID(t, p)
			reload(2)
			// The bounds act at the reload (SIGTERM from the master) or
			// two seconds after it (hard-stop-after); the connections that
			// must stay are checked after longer than the bound takes.
			time.Sleep(3 * time.Second)
			for _, c := range []struct {
				name   string
				lc     *longConn
				worker int
				ends   bool
			}{{"opened before both reloads", first, w1, tc.firstEnds}, {"opened between the reloads", second, w2, tc.secondEnds}} {
				eventually(t, 10*time.Second, c.name, func() error {
					_, _, old, err := p.Procs(ctx)
					if err != nil {
						return err
					}
					body, rerr := c.lc.request()
					alive := rerr == nil && body == c.lc.backend
					switch {
					case c.ends && (alive || slices.Contains(old, c.worker)):
						return fmt.Errorf("still served (%q, %v) by old worker %d (old workers %v): the bound did not end it", body, rerr, c.worker, old)
					case !c.ends && (!alive || !slices.Contains(old, c.worker)):
						return fmt.Errorf("connection ended (%q, %v) or its worker %d gone (old workers %v) without a bound that ends it", body, rerr, c.worker, old)
					}
					return nil
				})
			}
		})
	}
}
