package azurewrites

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/ctrlmetrics"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/provider"
)

// azureInstance is one controller: in the lab process, with its own
// provider (and cache of ARM documents), manager, metrics and Event
// counter; or a process of its own (proc).
type azureInstance struct {
	leaderElect bool
	metrics     *metrics.Metrics
	surfaced    atomic.Int64
	warnings    atomic.Int64
	elected     <-chan struct{}
	proc        *azureProc
	// cancel ends the manager, or SIGTERMs the process.
	cancel  context.CancelFunc
	done    chan error
	stopped atomic.Bool
	// exited is set when the manager has returned by itself (a leader that
	// lost its lease): it leads no more.
	exited atomic.Bool
	// stopLimit bounds the wait for the manager to return on stop.
	stopLimit time.Duration
}

// stop cancels the instance and waits for its manager (or process) to
// return, so that a replacement never runs beside a writer still
// finishing; the bound only keeps a hung manager from hanging the lab (a
// process is then SIGKILLed).
func (in *azureInstance) stop() {
	if in.stopped.Swap(true) {
		return
	}
	in.cancel()
	select {
	case <-in.done:
	case <-time.After(in.stopLimit):
		if in.proc != nil {
			in.proc.kill()
			<-in.done
		}
	}
}

// counters are the instance's reconciles and retried conflicts so far (a
// process that ended: its last scrape).
func (in *azureInstance) counters() ctrlmetrics.Counters {
	if in.proc != nil {
		c, _ := in.proc.scrape(in.exited.Load())
		return c
	}
	return ctrlmetrics.Counters{Conflicts: metrics.Sum(in.metrics.ProviderConflicts), Reconciles: metrics.Sum(in.metrics.Reconciles)}
}

// leads tells whether the instance has been elected (a process: reports
// leader_election_master_status 1 now).
func (in *azureInstance) leads() bool {
	if in.proc != nil {
		_, leader := in.proc.scrape(in.exited.Load())
		return leader
	}
	select {
	case <-in.elected:
		return true
	default:
		return false
	}
}

// start runs a zerodrop controller, in the lab process or (kill-mid-plan)
// as a process of its own.
func (r *azureRun) start(leaderElect bool) (*azureInstance, error) {
	if r.procs.asProcesses {
		return r.startProcess(leaderElect)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &azureInstance{leaderElect: leaderElect, cancel: cancel, done: make(chan error, 1), stopLimit: r.waitLimit()}
	cfg, err := r.instanceConfig(in, leaderElect)
	if err != nil {
		cancel()
		return nil, err
	}
	built, err := controller.Build(ctx, cfg)
	if err != nil {
		cancel()
		return nil, err
	}
	in.metrics, in.elected = built.Metrics, built.Manager.Elected()
	go func() {
		err := built.Start(ctx)
		in.exited.Store(true)
		in.done <- err
	}()
	r.instances = append(r.instances, in)
	return in, nil
}

// instanceConfig is the configuration of an in-process instance: the
// command's defaults, what startProcess gives a process on its command
// line, the emulator's HTTPS endpoint and a credential naming zerodrop, and
// a recorder that counts in's Events.
func (r *azureRun) instanceConfig(in *azureInstance, leaderElect bool) (controller.Config, error) {
	cfg := controller.DefaultConfig()
	cfg.RESTConfig, cfg.Registerer = r.cfg, prometheus.NewRegistry()
	cfg.Provider, cfg.Class = "azure", r.class()
	cfg.Azure.SubscriptionID, cfg.Azure.ResourceGroup, cfg.Azure.SubnetID = azureSub, azureGroup, azureSubnet
	cfg.Azure.LoadBalancers, cfg.Azure.Location = strings.Join(r.lbNames(), ","), "westeurope"
	var err error
	cfg.Azure.Credential, cfg.Azure.ClientOptions, err = azurearm.Remote(r.procs.served.URL, r.procs.served.CAPEM, zerodropIdentity)
	if err != nil {
		return cfg, err
	}
	cfg.ResyncPeriod = time.Hour
	cfg.MetricsAddr, cfg.ProbeAddr, cfg.DrainAddr = "0", "0", "0"
	cfg.LeaderElect, cfg.LeaderNamespace, cfg.LeaderID = leaderElect, r.ns, "zerodrop-lab-azure"
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = azureLease, azureRenew, azureRetryPeriod
	discard := logr.Discard()
	cfg.Override.Logger = &discard
	// Overridden (production: 1 s, no flag), as the lab has always run its
	// in-process instances; its processes run with the default.
	cfg.Override.DrainPollInterval = 250 * time.Millisecond
	cfg.Override.WrapRecorder = func(rec events.EventRecorder) events.EventRecorder {
		return &conflictEvents{EventRecorder: rec, n: &in.surfaced, warnings: &in.warnings}
	}
	return cfg, nil
}

// conflictEvents counts the Warning Events that surface a conflict.
type conflictEvents struct {
	events.EventRecorder
	n        *atomic.Int64
	warnings *atomic.Int64 // every Warning Event
}

func (c *conflictEvents) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	if eventtype == corev1.EventTypeWarning {
		c.warnings.Add(1)
	}
	if eventtype == corev1.EventTypeWarning && reason == service.ReasonSyncFailed {
		for _, a := range args {
			if err, ok := a.(error); ok && errors.Is(err, provider.ErrConflict) {
				c.n.Add(1)
				break
			}
		}
	}
	c.EventRecorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
}
