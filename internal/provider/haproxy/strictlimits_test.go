package haproxy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"zerodrop.dev/zerodrop/internal/model"
)

// TestNoStrictLimits: HAProxy under an open-file limit of 512 is given a
// listener with 600 checked servers, more descriptors than the limit allows.
// By default it refuses the configuration (the reload fails and nothing
// changes); with NoStrictLimits it loads it and serves all 600.
func TestNoStrictLimits(t *testing.T) {
	for _, relaxed := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoStrictLimits=%v", relaxed), func(t *testing.T) {
			dir := t.TempDir()
			// The limit is lowered for HAProxy only (lowering needs no
			// privilege), by a wrapper as the haproxy binary.
			wrapper := filepath.Join(dir, "haproxy.sh")
			if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nexec prlimit --nofile=512:512 haproxy \"$@\"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			p, err := New(testContext(t), Options{Dir: filepath.Join(dir, "state"), Binary: wrapper, NoStrictLimits: relaxed, StopOnClose: true,
				ReloadTimeout: 20 * time.Second, Log: testr.NewWithOptions(t, testr.Options{Verbosity: 1})})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			t.Cleanup(func() { stopAll(t, p) })

			l := model.Listener{Name: "fd/big/tcp-1", Address: "127.0.0.1", Port: freePort(t, "127.0.0.1"), Protocol: model.TCP,
				Probe: model.Probe{Kind: model.ProbeTCP, IntervalMillis: 10000}}
			for i := range 600 {
				// Nothing listens there: checks fail, which is not the point.
				l.Backends = append(l.Backends, model.Backend{Address: fmt.Sprintf("127.0.%d.%d", 10+i/250, 1+i%250), Port: 9, Weight: 1, State: model.Active})
			}
			desired := &model.LoadBalancer{Key: "fd/big", Listeners: []model.Listener{l}}
			ctx := testContext(t)
			obs, err := p.Observe(ctx, desired.Key)
			if err != nil {
				t.Fatal(err)
			}
			err = p.Apply(ctx, model.Diff(obs, desired))
			if !relaxed {
				if err == nil {
					t.Fatal("600 checked servers under a limit of 512 loaded with strict limits; want the reload refused")
				}
				t.Logf("refused as expected: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("Apply with NoStrictLimits: %v", err)
			}
			got, err := p.Observe(ctx, desired.Key)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(got.Listeners[0].Backends); n != 600 {
				t.Errorf("%d servers loaded, want 600", n)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "state", "haproxy.cfg")); !strings.Contains(string(b), "no strict-limits") {
				t.Errorf("the configuration does not say no strict-limits")
			}
		})
	}
}
