package bench

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
)

// benchConfig is the shipped controller's configuration — every flag at its
// default (controller.DefaultConfig), the provider read limit included —
// with what a controller in the bench's own process must change, none of
// which is a figure's: the apiserver's config, its own metrics registry,
// its listeners on free loopback ports (a fixed port would collide with
// whatever else runs here), and no log. Every other change a bench makes
// is beside it, with the production default it changes.
func benchConfig(rc *rest.Config) controller.Config {
	cfg := controller.DefaultConfig()
	cfg.RESTConfig, cfg.Registerer = rc, prometheus.NewRegistry()
	cfg.MetricsAddr, cfg.ProbeAddr, cfg.DrainAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	discard := logr.Discard()
	cfg.Override.Logger = &discard
	// Overridden (production: 10 min): a resync within a phase would add
	// its reads, and writes under --sync=full, to that phase's counts.
	cfg.ResyncPeriod = time.Hour
	return cfg
}

// benchController is one controller a bench started through the
// command's builder (controller.Build), as `zerodrop controller` runs.
type benchController struct {
	*controller.Instance
	cancel context.CancelFunc
	done   chan error
}

func startBench(b testing.TB, cfg controller.Config) *benchController {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	in, err := controller.Build(ctx, cfg)
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	r := &benchController{Instance: in, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- in.Start(ctx) }()
	return r
}

// stop ends the controller and waits until its manager has returned (the
// lease released, the provider closed).
func (r *benchController) stop(b testing.TB) {
	b.Helper()
	r.cancel()
	if err := <-r.done; err != nil {
		b.Fatal(err)
	}
}

// modeFlags is one configuration a bench measured with: the mode's name in
// its output and what it changed from the shipped controller.
type modeFlags struct {
	mode  string
	flags []string
}

func newModeFlags(mode string, cfg controller.Config) modeFlags {
	return modeFlags{mode, changedFlags(cfg)}
}

// flagsLine is the line a bench prints beside its figures (FlagsLine): what
// every mode changed, then what a mode changed besides, by mode.
func flagsLine(modes ...modeFlags) string {
	var common []string
	for _, f := range modes[0].flags {
		in := true
		for _, m := range modes[1:] {
			in = in && slices.Contains(m.flags, f)
		}
		if in {
			common = append(common, f)
		}
	}
	line := FlagsLine + "none"
	if len(common) > 0 {
		line = FlagsLine + strings.Join(common, ", ")
	}
	seen := map[string]bool{}
	for _, m := range modes {
		var extra []string
		for _, f := range m.flags {
			if !slices.Contains(common, f) {
				extra = append(extra, f)
			}
		}
		if len(extra) > 0 && !seen[m.mode] {
			seen[m.mode] = true
			line += "; " + m.mode + " also " + strings.Join(extra, ", ")
		}
	}
	return line
}
