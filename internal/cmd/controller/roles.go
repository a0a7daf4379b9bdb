package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/dataplane"
	"zerodrop.dev/zerodrop/internal/dataplane/stateauth"
	"zerodrop.dev/zerodrop/internal/metrics"
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
	// StateAlternatePort is the port the state endpoint binds on
	// StateAddr's host when StateAddr's port is in use: a second replica
	// on the node (a DaemonSet surge, host network). 0: none.
	StateAlternatePort int
	// Namespace, Selector and StatePort find the data-plane replicas from
	// the control role: their pods, and the port of their state endpoint.
	Namespace string
	Selector  string
	StatePort int
	// ReplicaAlternatePort is where the control role also looks for a
	// replica's state endpoint (StateAlternatePort): the port whose
	// certificate names the replica's pod is the one read. 0: none.
	ReplicaAlternatePort int
	// ReadTimeout bounds each read of a replica's state endpoint.
	ReadTimeout time.Duration
	// CASecret names the Secret in Namespace holding the private CA of the
	// state endpoint's certificates (control role), and the ConfigMap of
	// the same name where its certificates are published (both roles).
	CASecret string
	// PodName, PodNamespace and PodUID are the data-plane replica's own pod
	// (the downward API): its state endpoint certificate names the pod.
	PodName, PodNamespace, PodUID string
}

func (r *RoleConfig) flags(fs *pflag.FlagSet) {
	fs.StringVar(&r.Role, "role", "all", "all: one process allocates addresses, writes the Services and writes its HAProxy; "+
		"control: the leader allocates addresses and writes the Services, every replica serves the gates, no HAProxy is written (the data-plane replicas write their own); "+
		"data-plane: write only this replica's own HAProxy (no leader election), from the addresses in the Services' status, and serve its state to the control role")
	fs.StringVar(&r.StateAddr, "state-bind-address", ":9092", "data-plane role: read-only state endpoint the control role's gates read (GET /v1/backends, /v1/loadbalancer), TLS only, the control role's client certificate required; bind the node's internal address (the chart does)")
	fs.IntVar(&r.StateAlternatePort, "state-alternate-port", DefaultStateAlternatePort, "data-plane role: when --state-bind-address's port is in use (the node's other data-plane pod, during a DaemonSet surge), the state endpoint binds this port on the same address instead; the control role finds each pod at either by its certificate (0: none, the port in use is an error)")
	fs.StringVar(&r.PodName, "pod-name", os.Getenv("POD_NAME"), "data-plane role: this replica's pod name (default $POD_NAME, from the downward API)")
	fs.StringVar(&r.PodNamespace, "pod-namespace", os.Getenv("POD_NAMESPACE"), "data-plane role: this replica's pod namespace (default $POD_NAMESPACE)")
	fs.StringVar(&r.PodUID, "pod-uid", os.Getenv("POD_UID"), "data-plane role: this replica's pod UID (default $POD_UID, fieldRef metadata.uid): its state endpoint certificate names it")
	fs.StringVar(&r.Namespace, "data-plane-namespace", "", "control role: namespace of the data-plane replicas' pods")
	fs.StringVar(&r.Selector, "data-plane-selector", "", "control role: label selector of the data-plane replicas' pods, e.g. app.kubernetes.io/component=data-plane")
	fs.IntVar(&r.StatePort, "data-plane-state-port", 9092, "control role: port of the replicas' state endpoint on their pod addresses")
	fs.IntVar(&r.ReplicaAlternatePort, "data-plane-state-alternate-port", DefaultStateAlternatePort, "control role: the replicas' alternate state port (their --state-alternate-port): two pods on one node share its address, and each is read at the port whose certificate names that pod, found by a TLS handshake and kept until a read there fails (0: --data-plane-state-port only)")
	fs.DurationVar(&r.ReadTimeout, "data-plane-read-timeout", dataplane.DefaultReplicaReadTimeout, "control role: bound of each read of a replica's state endpoint; a replica that does not answer within it counts as not serving (the gates wait)")
	fs.StringVar(&r.CASecret, "data-plane-ca-secret", stateauth.DefaultCASecret, "control role: Secret in --data-plane-namespace holding the private CA of the state endpoint's certificates (created when missing); the CAs' certificates (not their keys) are published in the ConfigMap of the same name. "+
		"data-plane role: that ConfigMap's name, in the pod's namespace: the replica renews its certificate early when the CAs there differ from its certificate's")
}

// DefaultStateAlternatePort is the state endpoint's alternate port, both
// roles' default: the chart's state port is 9092, its probes' and metrics'
// 9093 and 9094.
const DefaultStateAlternatePort = 9095

// stateAlternateAddr is the state endpoint's alternate address: the port
// StateAlternatePort on StateAddr's host ("" when none).
func (r *RoleConfig) stateAlternateAddr() (string, error) {
	if r.StateAlternatePort == 0 {
		return "", nil
	}
	host, port, err := net.SplitHostPort(r.StateAddr)
	if err != nil {
		return "", fmt.Errorf("--state-bind-address %q: %w", r.StateAddr, err)
	}
	if r.StateAlternatePort < 0 || r.StateAlternatePort > 65535 || strconv.Itoa(r.StateAlternatePort) == port {
		return "", fmt.Errorf("--state-alternate-port %d: want 0 (none) or a port from 1 to 65535 other than --state-bind-address's (%s)", r.StateAlternatePort, port)
	}
	return net.JoinHostPort(host, strconv.Itoa(r.StateAlternatePort)), nil
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
		if r.ReadTimeout < 0 {
			return fmt.Errorf("--data-plane-read-timeout %s: want a positive duration (0: the default)", r.ReadTimeout)
		}
		if r.StatePort < 1 || r.StatePort > 65535 {
			return fmt.Errorf("--data-plane-state-port %d: want 1 to 65535", r.StatePort)
		}
		if r.ReplicaAlternatePort < 0 || r.ReplicaAlternatePort > 65535 {
			return fmt.Errorf("--data-plane-state-alternate-port %d: want 0 (none) or 1 to 65535", r.ReplicaAlternatePort)
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
		if _, err := r.stateAlternateAddr(); err != nil {
			return err
		}
		if r.PodName == "" || r.PodNamespace == "" || r.PodUID == "" {
			return errors.New("--role data-plane needs its pod's name, namespace and UID (--pod-name, --pod-namespace, --pod-uid, or POD_NAME, POD_NAMESPACE, POD_UID from the downward API): its state endpoint's certificate names the pod")
		}
	default:
		return fmt.Errorf("--role must be all, control or data-plane, not %q", r.Role)
	}
	return nil
}

// selector is --data-plane-selector, parsed (validate refused it when it
// does not parse).
func (r *RoleConfig) selector() labels.Selector {
	sel, _ := labels.Parse(r.Selector)
	return sel
}

// fleet is the control role's provider and its replicas: the pods that
// count, each read through its state endpoint over TLS that accepts only
// that pod's certificate. The authority (the CA, every control replica's
// client certificate) and the signer (the leader's) are added to mgr.
func (r *RoleConfig) fleet(mgr ctrl.Manager, log logr.Logger) (provider.Provider, *dataplane.Discovery, error) {
	sel := r.selector()
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return nil, nil, fmt.Errorf("data-plane CA client: %w", err)
	}
	auth := &stateauth.Authority{Client: c, Namespace: r.Namespace, SecretName: r.CASecret, Log: log.WithName("state-ca")}
	if err := mgr.Add(auth); err != nil {
		return nil, nil, err
	}
	recorder := mgr.GetEventRecorder("zerodrop-data-plane")
	signer := &stateauth.Signer{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Authority: auth,
		Namespace: r.Namespace, Selector: sel, Recorder: recorder, Log: log.WithName("state-signer")}
	if err := signer.SetupWithManager(mgr); err != nil {
		return nil, nil, fmt.Errorf("data-plane certificate signer: %w", err)
	}
	if err := dataplane.IndexReplicas(context.Background(), mgr.GetFieldIndexer(), sel); err != nil {
		return nil, nil, fmt.Errorf("data-plane pods index: %w", err)
	}
	return dataplane.Fleet{ProviderName: haproxy.Name, Protocols: haproxy.UnsupportedProtocols()},
		&dataplane.Discovery{Reader: mgr.GetCache(), Indexed: true, Namespace: r.Namespace, Selector: sel, Port: r.StatePort,
			AlternatePorts: alternates(r.ReplicaAlternatePort), Recorder: recorder, TLS: auth.TLSConfig, ReadTimeout: r.ReadTimeout}, nil
}

// stateEndpoint adds a data-plane replica's state endpoint to mgr: its
// certificate (requested for its pod through the CSR API) and the TLS
// server.
func (r *RoleConfig) stateEndpoint(mgr ctrl.Manager, src dataplane.StateSource, m *metrics.Metrics, reg prometheus.Registerer, log logr.Logger) error {
	rep := &stateauth.Replica{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(),
		PodNamespace: r.PodNamespace, PodName: r.PodName, PodUID: types.UID(r.PodUID), CAConfigMap: r.CASecret,
		Renewals: m.StateCertRenewals, Failures: m.StateCertFailures, Log: log.WithName("state-cert")}
	if err := mgr.Add(rep); err != nil {
		return err
	}
	alt, err := r.stateAlternateAddr()
	if err != nil {
		return err
	}
	return mgr.Add(&dataplane.Server{Addr: r.StateAddr, AlternateAddr: alt, Handler: dataplane.StateHandler(src), TLS: rep.TLSConfig(), Log: log.WithName("state"),
		Registerer: reg})
}

// alternates is the control role's alternate state ports: port, unless 0.
func alternates(port int) []int {
	if port == 0 {
		return nil
	}
	return []int{port}
}
