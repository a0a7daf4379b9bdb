package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/dataplane"
	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/podcache"
	"zerodrop.dev/zerodrop/internal/provider"
	zdaws "zerodrop.dev/zerodrop/internal/provider/aws"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/version"
	"zerodrop.dev/zerodrop/internal/webhook"
)

// Overrides are what a caller of Build puts in place of something the
// Config would make, or of a production default that has no flag. The
// command leaves them zero, and every zero is what the shipped binary
// does: tests, benches and the lab set them, and a bench that sets one
// says beside it which production default its figure changes. They are
// not flags.
type Overrides struct {
	// Provider is used instead of the one --provider would start (tests:
	// the memory provider, an HAProxy or Azure provider the test made).
	// Its KeyFunc and ValidateService are used when it has them, as the
	// Azure provider's are.
	Provider provider.Provider
	// DrainProvider is what the drain endpoint reads instead of Provider
	// (tests: a wrapper that fails some reads).
	DrainProvider provider.Provider
	// Metrics are used instead of new ones registered on
	// Config.Registerer: a caller that gave Provider hooks from them.
	Metrics *metrics.Metrics
	// Logger is used instead of the one --log-format makes; a pointer so
	// that logr.Discard(), itself a zero Logger, can be asked for.
	Logger *logr.Logger
	// WrapRecorder wraps the Service controller's Event recorder (the lab
	// counts the Warning Events that surface a conflict).
	WrapRecorder func(events.EventRecorder) events.EventRecorder
	// DrainPollInterval, CoalesceWindow and FailureEventThreshold are
	// service.Options'; GatePollInterval is the readiness gate's
	// (podgate.Options.PollInterval), DrainCallPollInterval the drain
	// endpoint's (drain.Options.PollInterval). Zero: their package's
	// default, which is what the command runs with.
	DrainPollInterval     time.Duration
	CoalesceWindow        time.Duration
	FailureEventThreshold int
	GatePollInterval      time.Duration
	DrainCallPollInterval time.Duration
	// KeepLeaseOnStop leaves the leader's lease held when the manager
	// stops, as a crashed leader does (tests of a standby taking over).
	KeepLeaseOnStop bool
}

// Instance is one controller built from a Config: the manager with the
// Service controller, the gates, the provider and its side loops added,
// not started yet.
type Instance struct {
	Manager manager.Manager
	Service *service.Controller
	Metrics *metrics.Metrics
	// Provider is what the Service controller writes through.
	Provider provider.Provider

	log logr.Logger
	// registerer is where Build registered the metrics, nil when the
	// caller gave its own (Override.Metrics): the guarded listeners'
	// collectors go there too.
	registerer prometheus.Registerer
	summary    []any // what the "starting" line logs
	drain      *drain.Server
	closeOnce  sync.Once
	closers    []func()
}

// DefaultConfig is the configuration the command runs with when given no
// flag: every field at its flag's default. Callers that build the
// controller in process (tests, benches, the lab, the demo) start from it
// so that what they do not set is what the shipped binary does. The
// defaults read from the environment ($AZURE_SUBSCRIPTION_ID, $POD_NAME,
// …) are read here too, as the command does.
func DefaultConfig() Config {
	var c Config
	c.Flags(pflag.NewFlagSet("defaults", pflag.ContinueOnError))
	return c
}

// setLogger gives controller-runtime its logger once per process: its
// SetLogger fulfils a process-wide promise and races with itself when
// called from several goroutines (the tests run several controllers in one
// process).
var setLogger sync.Once

// Build wires the controller described by cfg — the one place it is
// wired: the command, the tests, the benches and the lab all call it. ctx
// bounds the provider's life as well as the build (the HAProxy provider
// keeps it), so pass the context Start will run with. Start the Instance,
// or Close it.
func Build(ctx context.Context, cfg Config) (*Instance, error) {
	log := newLogger(cfg).WithName("zerodrop")
	if cfg.Override.Logger != nil {
		log = *cfg.Override.Logger
	}
	setLogger.Do(func() { ctrl.SetLogger(log) })
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	restCfg, err := cfg.restConfig()
	if err != nil {
		return nil, err
	}
	m := cfg.Override.Metrics
	var reg prometheus.Registerer
	if m == nil {
		reg = cfg.Registerer
		if reg == nil {
			reg = ctrlmetrics.Registry
		}
		if m, err = metrics.New(reg); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	role := cfg.DataPlane.role()
	base, err := newManager(cfg, restCfg, log, role)
	if err != nil {
		return nil, err
	}
	mgr := withProbeChecks(base)
	if podMetricsServed(cfg, role) {
		if err := addPodMetrics(mgr, cfg, log); err != nil {
			return nil, fmt.Errorf("metrics server: %w", err)
		}
	}
	if cfg.ProbeSocket != "" {
		if err := mgr.Add(mgr.socket(cfg.ProbeSocket, log.WithName("probes"))); err != nil {
			return nil, fmt.Errorf("probe socket: %w", err)
		}
	}
	// The drain key, before the webhook and the drain endpoint that use it.
	if cfg.Webhook.DrainKey, err = webhook.LoadDrainKey(ctx, mgr, cfg.Webhook); err != nil {
		return nil, err
	}
	if err := setupWebhook(ctx, mgr, cfg, log); err != nil {
		return nil, err
	}
	_ = mgr.AddHealthzCheck("ping", healthz.Ping)
	_ = mgr.AddReadyzCheck("ping", healthz.Ping)
	in := &Instance{Manager: mgr, Metrics: m, log: log, registerer: reg, drain: &drain.Server{}}
	if err := in.wire(ctx, cfg, role); err != nil {
		in.Close()
		return nil, err
	}
	return in, nil
}

// wire adds the provider, the Service controller and the gates to the
// instance's manager.
func (in *Instance) wire(ctx context.Context, cfg Config, role service.Role) error {
	w, err := in.addProvider(ctx, cfg, role)
	if err != nil {
		return err
	}
	in.Provider = w.prov
	opts, err := in.serviceOptions(cfg, w, role)
	if err != nil {
		return err
	}
	if in.Service, err = service.New(ctx, in.Manager, opts); err != nil {
		return fmt.Errorf("service controller: %w", err)
	}
	if err := in.addGates(cfg, w, opts.BackendAddressMap, role); err != nil {
		return err
	}
	in.summary = []any{"version", version.String(), "provider", w.prov.Name(), "role", cfg.DataPlane.Role, "sync", opts.Sync,
		"leaderElection", leaderElection(cfg, role), "readQPS", opts.ReadQPS, "readBurst", opts.ReadBurst}
	return nil
}

// Start runs the controller until ctx is done. Then, the manager stopped
// (and the lease released), pods whose preStop hook waits on this replica
// still get their answer, from the provider's live state, before the
// provider Build started is closed.
func (in *Instance) Start(ctx context.Context) error {
	in.log.Info("starting", in.summary...)
	err := in.Manager.Start(ctx)
	in.drain.Wait()
	in.Close()
	return err
}

// Close releases what Build started (the HAProxy provider's connections;
// its HAProxy keeps serving unless --haproxy-stop-on-exit): for an
// Instance that is never started. Start closes by itself.
func (in *Instance) Close() {
	in.closeOnce.Do(func() {
		for _, c := range in.closers {
			c()
		}
	})
}

// restConfig is the given REST config, or one from --kubeconfig, or the
// default lookup (in-cluster, $KUBECONFIG, ~/.kube/config).
func (c *Config) restConfig() (*rest.Config, error) {
	if c.RESTConfig != nil {
		return c.RESTConfig, nil
	}
	var (
		cfg *rest.Config
		err error
	)
	if c.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	} else {
		cfg, err = ctrlconfig.GetConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, nil
}

// gateOnly: the gates serve gate-only Services (the Azure provider, given
// load balancers another controller writes; the AWS provider, which does
// nothing else).
func (c *Config) gateOnly() bool {
	return c.Provider == "azure" && len(c.Azure.gateOnlyNames()) > 0 || c.Provider == "aws"
}

// leaderElection tells whether this process elects a leader: a data-plane
// replica is the only writer of its own HAProxy, so every one writes and
// none is elected.
func leaderElection(cfg Config, role service.Role) bool {
	return cfg.LeaderElect && role != service.RoleDataPlane
}

// newManager is the controller-runtime manager: its cache, metrics and
// probe servers, and leader election.
func newManager(cfg Config, restCfg *rest.Config, log logr.Logger, role service.Role) (manager.Manager, error) {
	metricsOpts := metricsOptions(cfg)
	if podMetricsServed(cfg, role) {
		// Served by podMetrics instead (Build adds it): the port is the
		// node's, and the node's other data-plane pod may hold it.
		metricsOpts = metricsserver.Options{BindAddress: "0"}
	}
	// Nothing here reads managedFields: without them every cached Service,
	// EndpointSlice and Pod is smaller (a write leaves the server's as they
	// are).
	// Every Pod in the cluster is cached, by both roles: only what zerodrop
	// reads of one is kept (podcache.Transform, which drops managedFields
	// too), a small part of a real Pod.
	cacheOpts := cache.Options{DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Transform: podcache.Transform}}}
	if role == service.RoleControl {
		// The gates read the node Leases of the data-plane replicas' nodes:
		// one namespace, which is all the chart's Role grants.
		cacheOpts.ByObject[&coordinationv1.Lease{}] = cache.ByObject{
			Namespaces: map[string]cache.Config{dataplane.NodeLeaseNamespace: {}}}
	}
	mgr, err := manager.New(restCfg, manager.Options{
		Cache:                         cacheOpts,
		Logger:                        log,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        cfg.ProbeAddr,
		PprofBindAddress:              cfg.PprofAddr,
		LeaderElection:                leaderElection(cfg, role),
		LeaderElectionID:              cfg.LeaderID,
		LeaderElectionNamespace:       cfg.LeaderNamespace,
		LeaderElectionReleaseOnCancel: !cfg.Override.KeepLeaseOnStop,
		LeaseDuration:                 &cfg.LeaseDuration,
		RenewDeadline:                 &cfg.RenewDeadline,
		RetryPeriod:                   &cfg.RetryPeriod,
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	return mgr, nil
}

// setupWebhook adds the mutating webhook when --webhook is on. It runs
// before mgr.Start: Setup writes the certificate files the webhook server
// reads once when it starts.
func setupWebhook(ctx context.Context, mgr manager.Manager, cfg Config, log logr.Logger) error {
	if !cfg.Webhook.Enabled {
		return nil
	}
	w := cfg.Webhook
	class := cfg.Class
	if class == "" {
		class = service.ClassPrefix + cfg.Provider
	}
	// No gate for a class nobody serves: the pod would never turn Ready.
	w.Classes = []string{class}
	w.IncludeClassless = cfg.AdoptClassless
	w.GateOnly = cfg.gateOnly()
	w.Logger = log.WithName("webhook")
	if err := webhook.Setup(ctx, mgr, w); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	return nil
}

// wiring is the provider and what the Service controller and the gates
// take from it.
type wiring struct {
	prov     provider.Provider
	keyFunc  func(*corev1.Service) string
	validate func(*corev1.Service) error
	replicas func(context.Context) ([]lbtarget.Replica, error)
	// gateOnly reads the load balancers of gate-only Services (nil: off).
	gateOnly provider.ForeignReader
}

// addProvider starts the provider the configuration names (or takes the
// override) and adds its side loops to the manager.
func (in *Instance) addProvider(ctx context.Context, cfg Config, role service.Role) (wiring, error) {
	var w wiring
	switch {
	case cfg.Override.Provider != nil:
		w.prov = cfg.Override.Provider
	case role == service.RoleControl:
		// No HAProxy here: every data-plane replica writes its own.
		prov, replicas, err := cfg.DataPlane.fleet(in.Manager, in.log)
		if err != nil {
			return w, err
		}
		w.prov, w.replicas = prov, replicas.Replicas
	case cfg.Provider == "azure":
		opts, err := cfg.Azure.options()
		if err != nil {
			return w, err
		}
		opts.Hooks = in.Metrics.ProviderHooks("azure")
		opts.Log = in.log.WithName("azure")
		if w.prov, err = newAzure(ctx, cfg.Azure, opts); err != nil {
			return w, err
		}
	case cfg.Provider == "aws":
		prov, err := newAWS(ctx, cfg.AWS, zdaws.Options{Hooks: in.Metrics.ProviderHooks("aws"), Log: in.log.WithName("aws")})
		if err != nil {
			return w, err
		}
		w.prov = prov
	default:
		hp, err := in.startHAProxy(ctx, cfg, role)
		if err != nil {
			return w, err
		}
		w.prov = hp
	}
	// Many Services share one Azure load balancer: the work item is the
	// load balancer (invariant 2), and the provider says which.
	if k, ok := w.prov.(interface{ KeyFunc(*corev1.Service) string }); ok {
		w.keyFunc = k.KeyFunc
	}
	if v, ok := w.prov.(interface{ ValidateService(*corev1.Service) error }); ok {
		w.validate = v.ValidateService
	}
	if fr, ok := w.prov.(provider.ForeignReader); ok && cfg.gateOnly() {
		w.gateOnly = fr
	}
	return w, nil
}

// startHAProxy starts (or attaches to) the HAProxy this process writes,
// and keeps it running.
func (in *Instance) startHAProxy(ctx context.Context, cfg Config, role service.Role) (*haproxy.Provider, error) {
	hcfg := cfg.HAProxy
	if hcfg.Dir == "" && hcfg.AdminSocket == "" && hcfg.MasterSocket == "" {
		hcfg.Dir = DefaultHAProxyDir()
	}
	hcfg.Hooks = in.Metrics.ProviderHooks("haproxy")
	hcfg.Log = in.log.WithName("haproxy")
	hp, err := haproxy.New(ctx, hcfg)
	if err != nil {
		return nil, fmt.Errorf("start haproxy provider: %w", err)
	}
	in.closers = append(in.closers, func() { _ = hp.Close() })
	// A killed HAProxy worker takes its master with it: the replica is
	// not ready while HAProxy is gone, and every replica (not only the
	// leader: the HAProxy serves whoever leads) starts it again from its
	// configuration and server-state file.
	_ = in.Manager.AddReadyzCheck("haproxy", func(r *http.Request) error { return hp.Alive(r.Context()) })
	if err := in.Manager.Add(restoreLoop(hp, in.log.WithName("haproxy"))); err != nil {
		return nil, fmt.Errorf("add haproxy restore loop: %w", err)
	}
	if role == service.RoleDataPlane {
		if err := cfg.DataPlane.stateEndpoint(in.Manager, hp, in.Metrics, in.registerer, in.log); err != nil {
			return nil, fmt.Errorf("data-plane state endpoint: %w", err)
		}
		reportTCPMigrateReq(in.Metrics, in.log)
	}
	return hp, nil
}

// serviceOptions are the Service controller's options from the
// configuration (Validate has parsed the address pool and map).
func (in *Instance) serviceOptions(cfg Config, w wiring, role service.Role) (service.Options, error) {
	addrMap, err := model.ParseAddressMap(cfg.AddressMap)
	if err != nil {
		return service.Options{}, fmt.Errorf("--backend-address-map: %w", err)
	}
	var pool netip.Prefix
	if cfg.AddressPool != "" && cfg.Provider == "haproxy" {
		// Azure assigns frontend addresses from the subnet itself.
		pool = netip.MustParsePrefix(cfg.AddressPool)
	}
	if role == service.RoleDataPlane && !cfg.AddressPoolGiven {
		pool = netip.Prefix{}
	}
	read := cfg.readLimit()
	o := cfg.Override
	if cfg.Provider != "haproxy" {
		// The check rate caps are the HAProxy data plane's, whose every
		// replica checks every backend; a cloud probes from its own hosts.
		cfg.Limits.MaxServiceCheckRate, cfg.Limits.NodeCheckBudget = 0, 0
	}
	opts := service.Options{
		Provider:              w.prov,
		LoadBalancerClass:     cfg.Class,
		AdoptClassless:        cfg.AdoptClassless,
		Sync:                  service.SyncMode(cfg.Sync),
		Workers:               cfg.Workers,
		AddressPool:           pool,
		BackendAddressMap:     addrMap,
		KubeProxyHealthzPort:  int32(cfg.KubeProxyHealthzPort),
		Limits:                cfg.Limits,
		KeyFunc:               w.keyFunc,
		ValidateService:       w.validate,
		ResyncPeriod:          cfg.ResyncPeriod,
		ReadQPS:               read.QPS,
		ReadBurst:             read.Burst,
		ImmediateRemoval:      cfg.Immediate,
		CoalesceWindow:        o.CoalesceWindow,
		DrainPollInterval:     o.DrainPollInterval,
		FailureEventThreshold: o.FailureEventThreshold,
		Role:                  role,
		Replicas:              w.replicas,
		ReplicaReadTimeout:    cfg.DataPlane.ReadTimeout,
		Metrics:               in.Metrics,
		Logger:                in.log,
	}
	if role == service.RoleControl {
		// A change of a replica's pod looks again at once at the load
		// balancers waiting for the replicas.
		opts.ReplicaNamespace, opts.ReplicaSelector = cfg.DataPlane.Namespace, cfg.DataPlane.selector()
	}
	if o.WrapRecorder != nil {
		opts.Recorder = o.WrapRecorder(in.Manager.GetEventRecorder("zerodrop-service-controller"))
	}
	return opts, nil
}

// addGates adds the readiness gate and the drain endpoint (the control
// role's and a one-process controller's), or a data-plane replica's
// readiness: every load balancer reconciled once.
func (in *Instance) addGates(cfg Config, w wiring, addrMap []model.AddressMapping, role service.Role) error {
	if role == service.RoleDataPlane {
		// The gates are the control role's: they read every replica. A
		// replica is ready once its HAProxy serves what the Services ask:
		// a DaemonSet update waits for it before it replaces the next one.
		_ = in.Manager.AddReadyzCheck("synced", func(*http.Request) error {
			if !in.Service.Synced() {
				return errors.New("not every load balancer reconciled yet")
			}
			return nil
		})
		return nil
	}
	finder := &lbtarget.Finder{Reader: in.Manager.GetCache(), Services: in.Service, Provider: w.prov, AddressMap: addrMap, Replicas: w.replicas,
		GateOnly: w.gateOnly}
	if cfg.ReadinessGate {
		if err := setupReadinessGate(in.Manager, finder, in.Metrics, cfg.Override.GatePollInterval, in.log); err != nil {
			return err
		}
	}
	if cfg.DrainAddr == "" || cfg.DrainAddr == "0" {
		return nil
	}
	if p := cfg.Override.DrainProvider; p != nil {
		f := *finder
		f.Provider = p
		finder = &f
	}
	in.drain = newDrainServer(in.Manager, cfg, finder, in.Metrics, in.registerer, in.log)
	if err := in.Manager.Add(in.drain); err != nil {
		return fmt.Errorf("add drain endpoint: %w", err)
	}
	return nil
}
