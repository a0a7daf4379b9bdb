package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/dataplane"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// RoleConfig is how one process takes part in an HAProxy data plane of
// several replicas (service.Role).
type RoleConfig struct {
	// Role is "all" (one process does everything), "control" or "data-plane".
	Role string
	// StateAddr is where a data-plane replica serves its read-only state
	// endpoint (dataplane.StateHandler).
	StateAddr string
	// Namespace, Selector and StatePort find the data-plane replicas from
	// the control role: their pods, and the port of their state endpoint.
	Namespace string
	Selector  string
	StatePort int
}

func (r *RoleConfig) flags(fs *pflag.FlagSet) {
	fs.StringVar(&r.Role, "role", "all", "all: one process allocates addresses, writes the Services and writes its HAProxy; "+
		"control: the leader allocates addresses and writes the Services, every replica serves the gates, no HAProxy is written (the data-plane replicas write their own); "+
		"data-plane: write only this replica's own HAProxy (no leader election), from the addresses in the Services' status, and serve its state to the control role")
	fs.StringVar(&r.StateAddr, "state-bind-address", ":9092", "data-plane role: read-only state endpoint the control role and the gates read (GET /v1/backends, /v1/loadbalancer)")
	fs.StringVar(&r.Namespace, "data-plane-namespace", "", "control role: namespace of the data-plane replicas' pods")
	fs.StringVar(&r.Selector, "data-plane-selector", "", "control role: label selector of the data-plane replicas' pods, e.g. app.kubernetes.io/component=data-plane")
	fs.IntVar(&r.StatePort, "data-plane-state-port", 9092, "control role: port of the replicas' state endpoint on their pod addresses")
}

func (r *RoleConfig) role() service.Role {
	switch r.Role {
	case "", "all":
		return service.RoleAll
	default:
		return service.Role(r.Role)
	}
}

// validate checks the role's flags against the rest of the configuration.
func (r *RoleConfig) validate(c *Config) error {
	switch r.role() {
	case service.RoleAll:
	case service.RoleControl:
		if c.Provider != "haproxy" {
			return fmt.Errorf("--role control: the data plane of replicas is HAProxy's; --provider is %q", c.Provider)
		}
		if r.Namespace == "" || r.Selector == "" {
			return errors.New("--role control needs --data-plane-namespace and --data-plane-selector: the gates wait for every data-plane replica, and must find them")
		}
		if _, err := labels.Parse(r.Selector); err != nil {
			return fmt.Errorf("--data-plane-selector: %w", err)
		}
		if r.StatePort < 1 || r.StatePort > 65535 {
			return fmt.Errorf("--data-plane-state-port %d: want 1 to 65535", r.StatePort)
		}
	case service.RoleDataPlane:
		if c.Provider != "haproxy" {
			return fmt.Errorf("--role data-plane: the data plane of replicas is HAProxy's; --provider is %q", c.Provider)
		}
		if c.Webhook.Enabled {
			return errors.New("--role data-plane does not serve the webhook: the control role does")
		}
		if r.StateAddr == "" || r.StateAddr == "0" {
			return errors.New("--role data-plane needs --state-bind-address: the gates read every replica's state")
		}
	default:
		return fmt.Errorf("--role must be all, control or data-plane, not %q", r.Role)
	}
	return nil
}

// fleet is the control role's provider and its replicas: the pods that
// count, each read through its state endpoint.
func (r *RoleConfig) fleet(reader client.Reader, recorder events.EventRecorder) (provider.Provider, *dataplane.Discovery) {
	sel, _ := labels.Parse(r.Selector) // validate parsed it
	return dataplane.Fleet{ProviderName: haproxy.Name, Protocols: haproxy.UnsupportedProtocols()},
		&dataplane.Discovery{Reader: reader, Namespace: r.Namespace, Selector: sel, Port: r.StatePort, Recorder: recorder}
}

// stateServer serves a data-plane replica's state endpoint in every
// process (no leader election): the gates read every replica.
type stateServer struct {
	addr string
	h    http.Handler
	log  logr.Logger
}

func (s *stateServer) NeedLeaderElection() bool { return false }

func (s *stateServer) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("state endpoint: %w", err)
	}
	srv := &http.Server{Handler: s.h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	s.log.Info("serving the data-plane state endpoint", "address", ln.Addr().String())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("state endpoint: %w", err)
	}
	return nil
}
