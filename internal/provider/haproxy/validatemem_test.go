package haproxy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"zerodrop.dev/zerodrop/internal/model"
)

// TestValidationReservesMemory: every `haproxy -c` runs while a
// reservation is held (Options.ReserveMemory), each reservation is released,
// and a configuration with more listeners and servers reserves more. The
// binary is a wrapper that logs each call before it runs the real HAProxy,
// so the hook sees which validations have run.
func TestValidationReservesMemory(t *testing.T) {
	real, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("no haproxy")
	}
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	wrapper := filepath.Join(dir, "haproxy-wrapper")
	script := "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = -c ] && echo check >> " + calls + "; done\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	checks := func() int {
		b, _ := os.ReadFile(calls)
		return strings.Count(string(b), "check")
	}
	type reservation struct {
		bytes                    int64
		checksBefore, checksThen int // validations run when reserved, and when released
		released                 bool
	}
	var mu sync.Mutex
	var got []*reservation
	opts := Options{Dir: filepath.Join(dir, "state"), Binary: wrapper, Log: testr.New(t), StopOnClose: true, ReloadTimeout: 20 * time.Second,
		ReserveMemory: func(_ context.Context, n int64) func() {
			r := &reservation{bytes: n, checksBefore: checks()}
			mu.Lock()
			got = append(got, r)
			mu.Unlock()
			return func() {
				mu.Lock()
				defer mu.Unlock()
				r.checksThen, r.released = checks(), true
			}
		}}
	p, err := New(testContext(t), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { stopAll(t, p) })

	bs := startBackends(t, 2, "127.0.6")
	const key, lbAddr = "default/reserve", "127.0.0.56"
	lb := &model.LoadBalancer{Key: key}
	for _, name := range []string{"tcp-80", "tcp-81", "tcp-82"} {
		lb.Listeners = append(lb.Listeners, listenerOf(key, name, lbAddr, freePort(t, lbAddr), bs))
	}
	applyDiff(t, p, lb)

	mu.Lock()
	defer mu.Unlock()
	if n := checks(); n < 2 || len(got) != n {
		t.Fatalf("%d validations, %d reservations: want one each, at the start and at the reload", n, len(got))
	}
	for i, r := range got {
		if !r.released {
			t.Errorf("reservation %d (%d bytes) never released", i, r.bytes)
		}
		if r.checksThen != r.checksBefore+1 {
			t.Errorf("reservation %d held over %d validations, want the one it was made for", i, r.checksThen-r.checksBefore)
		}
	}
	first, last := got[0], got[len(got)-1]
	if first.bytes <= 0 || last.bytes <= first.bytes {
		t.Errorf("reserved %d bytes for the empty configuration and %d for three listeners of two servers: want more for more", first.bytes, last.bytes)
	}
}
