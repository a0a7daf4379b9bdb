package controller

import (
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"zerodrop.dev/zerodrop/internal/controller/podgate"
	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/kubeproxy"
	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/metrics"
)

// setupReadinessGate adds the readiness gate's controller (pollInterval 0:
// its default).
func setupReadinessGate(mgr manager.Manager, finder *lbtarget.Finder, m *metrics.Metrics, pollInterval time.Duration, log logr.Logger) error {
	if err := podgate.Setup(mgr, podgate.Options{Finder: finder, Latency: m.GateLatency, Unserved: m.GateUnserved, PollInterval: pollInterval,
		Logger: log.WithName("podgate")}); err != nil {
		return fmt.Errorf("readiness gate: %w", err)
	}
	return nil
}

// newDrainServer is the termination gate's endpoint on --drain-bind-address.
// In node mode it reads each kube-proxy's /healthz, unless
// --kube-proxy-healthz-port is 0 (then it waits --kube-proxy-fallback-delay).
func newDrainServer(mgr manager.Manager, cfg Config, finder *lbtarget.Finder, m *metrics.Metrics, reg prometheus.Registerer, log logr.Logger) *drain.Server {
	var kp *kubeproxy.Client
	if cfg.KubeProxyHealthzPort != 0 {
		kp = &kubeproxy.Client{Port: int32(cfg.KubeProxyHealthzPort)}
	}
	h := drain.NewHandler(drain.Options{Reader: mgr.GetCache(), Finder: finder, Metrics: m, Logger: log.WithName("drain"),
		PollInterval: cfg.Override.DrainCallPollInterval,
		KubeProxy:    kp, KubeProxyMargin: cfg.KubeProxyMargin, KubeProxyFallback: cfg.KubeProxyFallback,
		Recorder: mgr.GetEventRecorder("zerodrop-drain"),
		// The relays' drain key: answers to a relay carry its proof.
		Key: func() []byte { return cfg.Webhook.DrainKey }})
	return &drain.Server{Addr: cfg.DrainAddr, Handler: h, Logger: log.WithName("drain"), Registerer: reg}
}
