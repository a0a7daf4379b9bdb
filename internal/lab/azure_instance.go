package lab

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/azure"
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
func (in *azureInstance) counters() counters {
	if in.proc != nil {
		c, _ := in.proc.scrape(in.exited.Load())
		return c
	}
	return counters{conflicts: metrics.Sum(in.metrics.ProviderConflicts), reconciles: metrics.Sum(in.metrics.Reconciles)}
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

// start runs a controller in the run's mode. ModeUpstreamLike is zerodrop's
// controller made upstream-like by configuration only: a full write on every sync (--sync=full), immediate
// removal, and an Event on every failed sync, as the upstream service
// controller records SyncLoadBalancerFailed each time.
func (r *azureRun) start(leaderElect bool) (*azureInstance, error) {
	if r.procs != nil {
		return r.startProcess(leaderElect)
	}
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &azureInstance{leaderElect: leaderElect, metrics: m, cancel: cancel, done: make(chan error, 1), stopLimit: r.waitLimit()}
	fail := func(err error) (*azureInstance, error) {
		cancel()
		return nil, err
	}
	prov, err := azure.New(ctx, azure.Options{
		SubscriptionID: azureSub, ResourceGroup: azureGroup, LoadBalancers: azureLBNames, SubnetID: azureSubnet,
		Location: "westeurope", Credential: r.emu.Credential(), ClientOptions: r.emu.ClientOptions(),
		Hooks: m.ProviderHooks("azure"),
		// The provider's default, 1 s: the SDK refuses less outside a test
		// binary ("polling frequency minimum is one second"), which made
		// every polled write of a command-line lab fail.
		PollFrequency: time.Second,
	})
	if err != nil {
		return fail(err)
	}
	lease, renew, retryPeriod := azureLease, azureRenew, azureRetryPeriod
	mgr, err := manager.New(r.cfg, manager.Options{
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Logger: logr.Discard(),
		LeaderElection: leaderElect, LeaderElectionID: "zerodrop-lab-azure", LeaderElectionNamespace: r.ns,
		LeaderElectionReleaseOnCancel: true, LeaseDuration: &lease, RenewDeadline: &renew, RetryPeriod: &retryPeriod,
	})
	if err != nil {
		return fail(fmt.Errorf("create manager: %w", err))
	}
	opts := service.Options{
		Provider: prov, LoadBalancerClass: r.class(), KeyFunc: prov.KeyFunc, ValidateService: prov.ValidateService,
		Metrics: m, Logger: logr.Discard(), ResyncPeriod: time.Hour, DrainPollInterval: 250 * time.Millisecond,
		Recorder: &conflictEvents{EventRecorder: mgr.GetEventRecorder("zerodrop-service-controller"), n: &in.surfaced, warnings: &in.warnings},
	}
	if r.mode == ModeUpstreamLike {
		opts.Sync, opts.ImmediateRemoval, opts.FailureEventThreshold = service.SyncFull, true, 1
	}
	if _, err := service.New(ctx, mgr, opts); err != nil {
		return fail(fmt.Errorf("service controller: %w", err))
	}
	in.elected = mgr.Elected()
	go func() {
		err := mgr.Start(ctx)
		in.exited.Store(true)
		in.done <- err
	}()
	r.instances = append(r.instances, in)
	return in, nil
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
