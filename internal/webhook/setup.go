// Package webhook is zerodrop's mutating admission webhook for pods. In
// namespaces labelled zerodrop.dev/inject=enabled it gives every pod that a
// zerodrop Service selects the readiness gate zerodrop.dev/load-balancer-ready
// (invariant 5) and, on the containers that serve the Service, a preStop
// hook that waits on the controller's drain endpoint (invariant 6). Its TLS
// comes from package certs, which issues and rotates it.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"github.com/spf13/pflag"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"zerodrop.dev/zerodrop/internal/certs"
	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/drainrelay"
)

// Defaults of Options.
const (
	DefaultPath             = "/mutate-pods"
	DefaultNamespace        = "zerodrop-system"
	DefaultDrainServiceName = "zerodrop-drain" // deploy/'s drain Service, at a fixed clusterIP
	DefaultDrainPort        = 9090
)

// Options configure the webhook. Zero values get the defaults.
type Options struct {
	// Enabled is set by the --webhook flag; Setup itself does not read it.
	Enabled bool
	// Path on the webhook server (default /mutate-pods); the webhook
	// configuration's service path must match.
	Path string
	// Classes are the loadBalancerClasses the controller serves (pass
	// its class, default zerodrop.dev/<provider>); empty accepts any
	// zerodrop.dev/ class.
	Classes []string
	// IncludeClassless also injects for LoadBalancer Services without a
	// loadBalancerClass (pass the controller's --adopt-classless).
	IncludeClassless bool
	// GateOnly also injects for Services annotated
	// zerodrop.dev/gate-only=true (the controller serves their gates).
	GateOnly bool
	// DrainHost is the preStop hook's host, required: the drain Service's
	// fixed clusterIP (deploy/services.yaml). A hook keeps the address it
	// was given at admission for the pod's life, so it must not change
	// when the Service is recreated; and the kubelet resolves hook hosts
	// with the node's resolver, so a Service DNS name does not work.
	DrainHost string
	// DrainPort is the drain Service's port (default 9090).
	DrainPort int32
	// DrainRelayImage, when set, is the image of the drain relay sidecar
	// the webhook adds (zerodrop's own); empty: the hook calls the drain
	// Service directly.
	DrainRelayImage string
	// DrainRelayPort is the relay's port in the pod (default
	// drainrelay.DefaultPort).
	DrainRelayPort int32
	// DrainKeySecret is the Secret in Certs.Namespace holding the drain key
	// (created when missing); empty: no key, and relays get no token.
	DrainKeySecret string
	// DrainKey is the drain key (LoadDrainKey): each relay's token derives
	// from it, and the drain endpoint proves its answers with it.
	DrainKey []byte
	// ManageCerts runs the certificate manager; without it the certificate
	// files must come from elsewhere (cert-manager, a mounted Secret).
	ManageCerts bool
	// Certs configures the certificate manager. Setup fills Client (a
	// direct API client), CertDir, CertName and KeyName (the webhook
	// server's) and Logger when they are empty; Namespace defaults to
	// zerodrop-system.
	Certs certs.Options
	// Reader reads Namespaces, Services and the drain Service (default the
	// manager's cached client).
	Reader client.Reader
	// Recorder (default the manager's, as zerodrop-webhook).
	Recorder events.EventRecorder
	Logger   logr.Logger
}

// Flags registers the webhook's flags on fs. --load-balancer-class and
// --adopt-classless belong to the controller; pass them on as Classes and
// IncludeClassless.
func (o *Options) Flags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "webhook", false, "serve the mutating webhook that injects the readiness gate and the drain preStop hook")
	fs.StringVar(&o.Certs.Namespace, "webhook-namespace", DefaultNamespace, "namespace of the webhook Service and its certificate Secret")
	fs.StringVar(&o.Certs.ServiceName, "webhook-service", certs.DefaultServiceName, "webhook Service the serving certificate names")
	fs.StringVar(&o.Certs.SecretName, "webhook-secret", certs.DefaultSecretName, "Secret that holds the webhook CA and serving certificate")
	fs.StringVar(&o.Certs.WebhookConfiguration, "webhook-configuration", certs.DefaultWebhookConfiguration, "MutatingWebhookConfiguration whose caBundle is kept current")
	fs.BoolVar(&o.ManageCerts, "webhook-manage-certs", true, "issue and rotate the webhook certificate (false: the files come from elsewhere)")
	fs.DurationVar(&o.Certs.CAValidity, "webhook-ca-validity", certs.DefaultCAValidity, "validity of a new webhook CA (renewed with a third left)")
	fs.DurationVar(&o.Certs.ServingValidity, "webhook-cert-validity", certs.DefaultServingValidity, "validity of a new serving certificate (renewed with a third left)")
	fs.StringVar(&o.DrainHost, "webhook-drain-host", "", "IP address the injected preStop hook calls, required with --webhook: the drain Service's fixed clusterIP")
	o.DrainPort = DefaultDrainPort
	fs.Func("webhook-drain-port", "port of the drain Service the hook calls (default 9090)", portFlag(&o.DrainPort))
	fs.StringVar(&o.DrainRelayImage, "webhook-drain-relay-image", "", "image of the drain relay sidecar injected beside the hook (zerodrop's own; needs Kubernetes 1.29+ native sidecars); empty: the hook calls the drain Service directly")
	o.DrainRelayPort = drainrelay.DefaultPort
	fs.StringVar(&o.DrainKeySecret, "webhook-drain-key-secret", drain.DefaultKeySecret, "Secret in --webhook-namespace holding the drain key (created when missing): the drain relay's per-pod token derives from it, and the drain endpoint proves its answers with it; empty: relays get no token")
	fs.Func("webhook-drain-relay-port", fmt.Sprintf("port of the drain relay in the pod (default %d)", drainrelay.DefaultPort), portFlag(&o.DrainRelayPort))
}

// portFlag parses a TCP port (1 to 65535) into dst.
func portFlag(dst *int32) func(string) error {
	return func(s string) error {
		p, err := strconv.ParseUint(s, 10, 16)
		if err != nil || p == 0 {
			return fmt.Errorf("want a port from 1 to 65535, not %q", s)
		}
		*dst = int32(p)
		return nil
	}
}

// Validate checks the options a user sets; Setup calls it, and the
// controller before it connects to anything.
func (o Options) Validate() error {
	if o.DrainHost == "" {
		return errors.New("--webhook-drain-host is required: the drain Service's fixed clusterIP (spec.clusterIP of zerodrop-drain)")
	}
	addr, err := netip.ParseAddr(o.DrainHost)
	if err != nil || addr.Zone() != "" {
		return fmt.Errorf("--webhook-drain-host %q is not an IP address: the kubelet resolves hook hosts with the node's resolver, which does not know Service names; give the drain Service's fixed clusterIP", o.DrainHost)
	}
	if addr.IsUnspecified() || addr.IsLoopback() || addr.IsMulticast() {
		return fmt.Errorf("--webhook-drain-host %s cannot be a ClusterIP: the kubelet calls it from the node", o.DrainHost)
	}
	return nil
}

func (o Options) relay() *Relay {
	if o.DrainRelayImage == "" {
		return nil
	}
	port := o.DrainRelayPort
	if port == 0 {
		port = drainrelay.DefaultPort
	}
	return &Relay{Image: o.DrainRelayImage, Port: port}
}

// Setup registers the handler at Path on the manager's webhook server and,
// with ManageCerts, issues or loads the certificate and writes it to the
// server's certificate directory before returning, so the server finds it
// when the manager starts it; the certificate manager then runs in every
// replica (no leader election). Call it before mgr.Start. It also adds the
// readiness checks "webhook" (the server answers TLS) and, when Reader is
// the manager's, "webhook-cache" (its informers have synced).
func Setup(ctx context.Context, mgr manager.Manager, opts Options) error {
	log := opts.Logger
	if opts.Path == "" {
		opts.Path = DefaultPath
	}
	if opts.Certs.Namespace == "" {
		opts.Certs.Namespace = DefaultNamespace
	}
	if opts.DrainPort == 0 {
		opts.DrainPort = DefaultDrainPort
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	if opts.Reader == nil {
		opts.Reader = mgr.GetClient()
		if err := readyAfterCacheSync(ctx, mgr); err != nil {
			return err
		}
	}
	if opts.Recorder == nil {
		opts.Recorder = mgr.GetEventRecorder("zerodrop-webhook")
	}
	srv := mgr.GetWebhookServer()
	srv.Register(opts.Path, &admission.Webhook{Handler: &Handler{
		Reader:     opts.Reader,
		Decoder:    admission.NewDecoder(mgr.GetScheme()),
		Recorder:   opts.Recorder,
		Filter:     Filter{Classes: opts.Classes, IncludeClassless: opts.IncludeClassless, GateOnly: opts.GateOnly},
		DrainHost:  opts.DrainHost,
		DrainPort:  opts.DrainPort,
		DrainRelay: opts.relay(),
		DrainKey:   opts.DrainKey,
		Logger:     log.WithName("admission"),
	}})
	if opts.ManageCerts {
		if err := setupCerts(ctx, mgr, srv, opts.Certs, log.WithName("certs")); err != nil {
			return err
		}
	}
	if err := mgr.AddReadyzCheck("webhook", srv.StartedChecker()); err != nil {
		return fmt.Errorf("webhook readiness check: %w", err)
	}
	return nil
}

// LoadDrainKey reads (or creates) the drain key when a relay is injected
// and DrainKeySecret is set; nil otherwise. Call it before Setup and pass
// the key on as DrainKey and to the drain endpoint (drain.Options.Key).
func LoadDrainKey(ctx context.Context, mgr manager.Manager, opts Options) ([]byte, error) {
	if !opts.Enabled || opts.DrainRelayImage == "" || opts.DrainKeySecret == "" {
		return nil, nil
	}
	ns := opts.Certs.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	// A direct client: the manager's cache has not started, and a cache of
	// Secrets would need cluster-wide list and watch.
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("drain key: API client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return drain.EnsureKey(ctx, c, ns, opts.DrainKeySecret)
}

// readyAfterCacheSync starts the Namespace and Service informers with the
// manager's cache (instead of at the first admission) and adds the
// readiness check "webhook-cache", which fails until the cache has synced:
// a replica answering from an empty cache would find no Service selecting
// the pod and admit it without gates.
func readyAfterCacheSync(ctx context.Context, mgr manager.Manager) error {
	for _, obj := range []client.Object{&corev1.Namespace{}, &corev1.Service{}} {
		// The cache has not started: this registers the informer, it
		// does not wait for it.
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return fmt.Errorf("webhook: informer for %T: %w", obj, err)
		}
	}
	s := &cacheSynced{cache: mgr.GetCache()}
	if err := mgr.Add(s); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook-cache", s.check); err != nil {
		return fmt.Errorf("webhook readiness check: %w", err)
	}
	return nil
}

// cacheSynced records when the manager's cache has synced; every replica
// runs it (no leader election), as every replica serves the webhook.
type cacheSynced struct {
	cache  cache.Cache
	synced atomic.Bool
}

func (s *cacheSynced) NeedLeaderElection() bool { return false }

func (s *cacheSynced) Start(ctx context.Context) error {
	if s.cache.WaitForCacheSync(ctx) {
		s.synced.Store(true)
	}
	return nil
}

func (s *cacheSynced) check(*http.Request) error {
	if !s.synced.Load() {
		return errors.New("informer caches not synced")
	}
	return nil
}

func setupCerts(ctx context.Context, mgr manager.Manager, srv ctrlwebhook.Server, co certs.Options, log logr.Logger) error {
	if co.Client == nil {
		c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
		if err != nil {
			return fmt.Errorf("webhook certificates: API client: %w", err)
		}
		co.Client = c
	}
	// Register has defaulted the server's options.
	if ds, ok := srv.(*ctrlwebhook.DefaultServer); ok {
		if co.CertDir == "" {
			co.CertDir = ds.Options.CertDir
		}
		if co.CertName == "" {
			co.CertName = ds.Options.CertName
		}
		if co.KeyName == "" {
			co.KeyName = ds.Options.KeyName
		}
	}
	if co.Logger.GetSink() == nil {
		co.Logger = log
	}
	m, err := certs.New(co)
	if err != nil {
		return fmt.Errorf("webhook certificates: %w", err)
	}
	// The server reads the files once at start; they must be there.
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := m.Sync(syncCtx); err != nil {
		return fmt.Errorf("webhook certificates: %w", err)
	}
	if err := mgr.Add(m); err != nil {
		return fmt.Errorf("webhook certificates: %w", err)
	}
	return nil
}
