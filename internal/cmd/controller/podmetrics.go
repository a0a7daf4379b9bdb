package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"zerodrop.dev/zerodrop/internal/controller/service"
)

// PodUIDParam is the scrape's query parameter naming the pod the scraper
// means (the chart's PodMonitor sets it from the target's pod UID): a
// data-plane replica answers a scrape meant for another pod with 409.
const PodUIDParam = "pod_uid"

// DefaultMetricsPortRetry is how often a data-plane replica tries its
// metrics port again while another process holds it.
const DefaultMetricsPortRetry = time.Second

// podMetrics is a data-plane replica's metrics server: controller-runtime's,
// started once its port is free. Host networking makes the port the node's,
// and during a DaemonSet surge the node's old data-plane pod holds it: the
// new replica waits (logging once), serving its probes, state and HAProxy
// meanwhile — its readiness never waits for metrics, or the surge would
// stall on the old pod that only leaves once the new one is ready — and
// takes the port when the old pod's process releases it. Each scrape names
// the pod it means (PodUIDParam): one meant for another pod is answered
// 409, so the node's port never passes one pod's metrics off as another's.
type podMetrics struct {
	opts             metricsserver.Options
	restCfg          *rest.Config
	httpClient       *http.Client
	podName, podUID  string
	retry            time.Duration
	log              logr.Logger
	secureAuthFilter func(*rest.Config, *http.Client) (metricsserver.Filter, error)
}

// NeedLeaderElection: every replica serves its own metrics.
func (p *podMetrics) NeedLeaderElection() bool { return false }

// Start waits for the port, then serves until ctx ends.
func (p *podMetrics) Start(ctx context.Context) error {
	opts := p.opts
	opts.FilterProvider = p.filters
	waiting := time.Time{}
	for {
		err := p.bindable()
		if err == nil {
			if !waiting.IsZero() {
				p.log.Info("the metrics port is free: serving metrics", "address", opts.BindAddress, "waited", time.Since(waiting).Round(time.Second))
				waiting = time.Time{}
			}
			srv, nerr := metricsserver.NewServer(opts, p.restCfg, p.httpClient)
			if nerr != nil {
				return fmt.Errorf("metrics server: %w", nerr)
			}
			if err = srv.Start(ctx); err == nil || ctx.Err() != nil {
				return err
			}
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return err
		}
		// Taken between the check and the server's own bind, or held: wait.
		if waiting.IsZero() {
			waiting = time.Now()
			p.log.Info("the metrics port is in use (the node's other data-plane pod, during an update?): waiting for it; probes, state endpoint and HAProxy serve meanwhile",
				"address", opts.BindAddress)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(p.retry):
		}
	}
}

// bindable binds the port for a moment: nil when it is free.
func (p *podMetrics) bindable() error {
	ln, err := net.Listen("tcp", p.opts.BindAddress)
	if err != nil {
		return err
	}
	return ln.Close()
}

// filters is the server's FilterProvider: with --metrics-secure the
// caller's authorization first, then the pod the scrape means.
func (p *podMetrics) filters(cfg *rest.Config, hc *http.Client) (metricsserver.Filter, error) {
	var auth metricsserver.Filter
	if p.secureAuthFilter != nil {
		var err error
		if auth, err = p.secureAuthFilter(cfg, hc); err != nil {
			return nil, err
		}
	}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		h := podScrape(p.podName, p.podUID, next)
		if auth == nil {
			return h, nil
		}
		return auth(log, h)
	}, nil
}

// podScrape answers a scrape that names another pod (PodUIDParam) with
// 409 and says whose metrics the port serves; one that names this pod, or
// none (a scraper that does not say), is served.
func podScrape(podName, podUID string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if want := r.URL.Query().Get(PodUIDParam); want != "" && want != podUID {
			http.Error(w, fmt.Sprintf("this port serves the metrics of pod %s (uid %s), not of pod uid %s: the node's other data-plane pod holds it (a DaemonSet surge)",
				podName, podUID, want), http.StatusConflict)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// metricsOptions are the metrics server's options from the flags.
func metricsOptions(cfg Config) metricsserver.Options {
	o := metricsserver.Options{BindAddress: cfg.MetricsAddr}
	if cfg.MetricsSecure {
		// The certificate is self-signed (controller-runtime's fallback):
		// the bearer token, not the certificate, is what a scraper proves.
		o.SecureServing = true
		o.FilterProvider = metricsAuth
	}
	return o
}

// podMetricsServed: a data-plane replica's metrics are served by
// podMetrics (waiting for a port the node's other data-plane pod holds,
// and answering only scrapes meant for its pod) instead of the manager.
func podMetricsServed(cfg Config, role service.Role) bool {
	return role == service.RoleDataPlane && cfg.MetricsAddr != "" && cfg.MetricsAddr != "0"
}

// addPodMetrics adds a data-plane replica's metrics server (podMetrics).
func addPodMetrics(mgr manager.Manager, cfg Config, log logr.Logger) error {
	o := metricsOptions(cfg)
	pm := &podMetrics{opts: o, restCfg: mgr.GetConfig(), httpClient: mgr.GetHTTPClient(),
		podName: cfg.DataPlane.PodName, podUID: cfg.DataPlane.PodUID, retry: DefaultMetricsPortRetry, log: log.WithName("metrics")}
	if o.SecureServing {
		pm.secureAuthFilter = o.FilterProvider
	}
	pm.opts.FilterProvider = nil
	return mgr.Add(pm)
}
