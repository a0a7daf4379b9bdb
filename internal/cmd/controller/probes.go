package controller

import (
	"net/http"
	"sync"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"zerodrop.dev/zerodrop/internal/probe"
)

// probeChecks is the manager with its health and readiness checks kept
// here too: controller-runtime serves them on a TCP address only
// (--health-probe-bind-address), and a host-network data-plane pod's TCP
// port is the node's, which the node's other data-plane pod (a DaemonSet
// surge) holds — its answers would be taken for this pod's. The same
// checks are served on a unix socket in the pod's own volume
// (--health-probe-socket), for an exec probe (`zerodrop probe`).
type probeChecks struct {
	manager.Manager

	mu                  sync.Mutex
	liveness, readiness map[string]healthz.Checker
}

func withProbeChecks(mgr manager.Manager) *probeChecks {
	return &probeChecks{Manager: mgr, liveness: map[string]healthz.Checker{}, readiness: map[string]healthz.Checker{}}
}

// AddHealthzCheck adds the check to the manager's and keeps it.
func (p *probeChecks) AddHealthzCheck(name string, check healthz.Checker) error {
	if err := p.Manager.AddHealthzCheck(name, check); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.liveness[name] = check
	return nil
}

// AddReadyzCheck adds the check to the manager's and keeps it.
func (p *probeChecks) AddReadyzCheck(name string, check healthz.Checker) error {
	if err := p.Manager.AddReadyzCheck(name, check); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.readiness[name] = check
	return nil
}

// socket is the runnable serving the checks kept on the unix socket path.
// Its handler is made at the first probe, once the manager has started:
// every check has been added by then (the manager refuses later ones).
func (p *probeChecks) socket(path string, log logr.Logger) *probe.Socket {
	h := sync.OnceValue(func() http.Handler {
		p.mu.Lock()
		defer p.mu.Unlock()
		return probe.Handler(p.liveness, p.readiness)
	})
	return &probe.Socket{Path: path, Log: log,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h().ServeHTTP(w, r) })}
}
