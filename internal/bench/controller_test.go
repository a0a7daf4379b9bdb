package bench

import (
	"context"
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
