// Package controller is the `zerodrop controller` command: flags, the
// manager with leader election and metrics, the provider and the Service
// controller, wired together.
package controller

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/webhook"
)

// Config is the controller's configuration; flags fill it, tests build it.
type Config struct {
	Kubeconfig     string
	RESTConfig     *rest.Config
	Provider       string
	Class          string
	AdoptClassless bool
	Sync           string
	Workers        int
	AddressPool    string
	AddressMap     string
	// AddressPoolGiven: --address-pool was on the command line. A data-plane
	// replica checks status addresses against the pool only then (its
	// default is the control role's allocation default, which a replica
	// started without the flag never agreed to).
	AddressPoolGiven bool
	// KubeProxyHealthzPort is what node-mode Cluster listeners probe.
	KubeProxyHealthzPort int
	// Limits cap ports per Service and health checks per second per Service
	// and per data-plane replica (model.Limits; issue 46, M8).
	Limits model.Limits
	// KubeProxyMargin and KubeProxyFallback tune the node-mode termination
	// gate (drain.Options).
	KubeProxyMargin   time.Duration
	KubeProxyFallback time.Duration
	ResyncPeriod      time.Duration
	DrainAddr         string
	ReadinessGate     bool
	// Immediate removes backends at once (upstream-like, for comparison).
	Immediate   bool
	MetricsAddr string
	// MetricsSecure serves metrics over HTTPS to callers the API server
	// authenticates (TokenReview) and authorizes (SubjectAccessReview for
	// GET on the path); off by default so tests and the lab scrape plain HTTP.
	MetricsSecure bool
	ProbeAddr     string
	// ProbeSocket, when set, serves the same checks on a unix socket, for
	// an exec probe (`zerodrop probe`): a host-network pod's TCP port is
	// the node's, shared with the node's other data-plane pod in a surge.
	ProbeSocket     string
	PprofAddr       string
	LeaderElect     bool
	LeaderNamespace string
	LeaderID        string
	LeaseDuration   time.Duration
	RenewDeadline   time.Duration
	RetryPeriod     time.Duration

	// LogFormat is text (klog) or json (one JSON object per line, klog's
	// own output included); LogOutput is where JSON goes (default stderr).
	LogFormat string
	LogOutput io.Writer

	HAProxy haproxy.Options
	// HAProxyRead bounds the Service controller's reads of HAProxy
	// (--haproxy-read-qps, --haproxy-read-burst; zero: DefaultHAProxyRead).
	HAProxyRead ReadLimit
	// DataPlane is this process's part in an HAProxy data plane of replicas.
	DataPlane RoleConfig
	Azure     AzureConfig
	AWS       AWSConfig
	Webhook   webhook.Options
	// Registerer receives the metrics (default: controller-runtime's registry).
	Registerer prometheus.Registerer
	// Override replaces what Build would make, for tests, benches and the
	// lab; the command leaves it zero.
	Override Overrides
}

// DefaultHAProxyDir is where a locally owned HAProxy keeps its state.
func DefaultHAProxyDir() string { return filepath.Join(os.TempDir(), "zerodrop-haproxy") }

// Flags registers the command's flags on fs.
func (c *Config) Flags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&c.Provider, "provider", "haproxy", "load balancer provider: haproxy, azure, or aws (gate-only: the gates of Services annotated zerodrop.dev/gate-only=true on the NLBs cloud-provider-aws writes; zerodrop writes nothing on AWS)")
	fs.StringVar(&c.Class, "load-balancer-class", "", "spec.loadBalancerClass to manage (default zerodrop.dev/<provider>)")
	fs.BoolVar(&c.AdoptClassless, "adopt-classless", false, "also manage LoadBalancer Services without a loadBalancerClass")
	fs.StringVar(&c.Sync, "sync", string(service.SyncIncremental), "incremental (write only differences) or full (upstream-like: rewrite everything on every sync)")
	fs.IntVar(&c.Workers, "workers", 4, "load balancers reconciled in parallel (with a provider that joins concurrent writes into one, haproxy: at least 1024)")
	fs.StringVar(&c.AddressPool, "address-pool", "127.0.100.0/24", "CIDR frontend addresses are allocated from; a --role=data-plane replica given it binds only Services' status addresses inside it (without it, any)")
	fs.StringVar(&c.AddressMap, "backend-address-map", "", "rewrite backend addresses, FROM=TO[,…] with equal prefix lengths (the lab publishes loopback pods as 198.18.0.0/15=127.18.0.0/15)")
	fs.IntVar(&c.KubeProxyHealthzPort, "kube-proxy-healthz-port", 10256, "node mode, externalTrafficPolicy Cluster: probe GET /healthz on this port of every node (kube-proxy's --healthz-bind-address), as cloud load balancers do; 0 probes the nodePort over TCP")
	fs.DurationVar(&c.KubeProxyMargin, "kube-proxy-sync-margin", 2*time.Second, "node mode: a drain call that waits for kube-proxy answers this long after the EndpointSlices show the pod's endpoint terminating, once every kube-proxy that may send the pod new connections reports (its /healthz on --kube-proxy-healthz-port) a sync since the pod's deletion began; kube-proxy syncs a change within its --min-sync-period (1s)")
	fs.DurationVar(&c.KubeProxyFallback, "kube-proxy-fallback-delay", 10*time.Second, "node mode with --kube-proxy-healthz-port 0: a drain call counts kube-proxy as synced this long after the pod's deletion began")
	fs.IntVar(&c.Limits.MaxPorts, "max-ports-per-service", model.DefaultMaxPorts, "a Service with more ports is refused (a Warning Event and ConfigValid=False); one served before the cap keeps its listeners as they are, backends following its endpoints, and a change to them is refused; 0: no cap")
	fs.Float64Var(&c.Limits.MaxServiceCheckRate, "service-check-limit", model.DefaultMaxServiceCheckRate, "HAProxy: health checks per second one Service may make each data-plane replica run (its backends times its ports over its check interval); a Service over it has its check intervals stretched, its backends kept; 0: no cap")
	fs.Float64Var(&c.Limits.NodeCheckBudget, "node-check-budget", model.DefaultNodeCheckBudget, "HAProxy: health checks per second each data-plane replica runs for all its Services; past it the newest Services have their check intervals stretched, by powers of two, until the total fits; 0: no cap")
	fs.DurationVar(&c.ResyncPeriod, "resync-period", 10*time.Minute, "every load balancer is checked again this often")
	fs.StringVar(&c.DrainAddr, "drain-bind-address", ":9090", "termination-gate endpoint (GET /drain?pod=ns/name), served by every replica (0 disables)")
	fs.BoolVar(&c.ReadinessGate, "readiness-gate", true, "set the zerodrop.dev/load-balancer-ready condition on pods that carry the gate")
	fs.BoolVar(&c.Immediate, "immediate-removal", false, "remove backends at once instead of draining them (upstream-like, for comparison)")
	fs.StringVar(&c.MetricsAddr, "metrics-bind-address", ":8080", "Prometheus metrics address (0 disables)")
	fs.BoolVar(&c.MetricsSecure, "metrics-secure", false, "serve metrics over HTTPS, only to callers the API server authenticates and authorizes for GET on the path (needs create on tokenreviews and subjectaccessreviews)")
	fs.StringVar(&c.ProbeAddr, "health-probe-bind-address", ":8081", "healthz/readyz address (0 disables)")
	fs.StringVar(&c.ProbeSocket, "health-probe-socket", "", "also serve /healthz and /readyz on this unix socket, for an exec probe (zerodrop probe --socket PATH /readyz): a socket in the pod's own volume is the pod's alone, where a host-network pod's probe port is the node's (empty: none)")
	fs.StringVar(&c.PprofAddr, "pprof-bind-address", "0", "Go's net/http/pprof profiles (CPU, heap, goroutines) at /debug/pprof/ on this address, without authentication: bind it to loopback and reach it with kubectl port-forward (0 disables)")
	fs.BoolVar(&c.LeaderElect, "leader-elect", true, "elect a leader through a Lease; only the leader writes")
	fs.StringVar(&c.LeaderNamespace, "leader-election-namespace", "kube-system", "namespace of the leader Lease")
	fs.StringVar(&c.LeaderID, "leader-election-id", "zerodrop-controller", "name of the leader Lease")
	fs.DurationVar(&c.LeaseDuration, "lease-duration", 15*time.Second, "leader lease duration")
	fs.DurationVar(&c.RenewDeadline, "renew-deadline", 10*time.Second, "leader renew deadline")
	fs.DurationVar(&c.RetryPeriod, "retry-period", 2*time.Second, "leader election retry period")
	fs.StringVar(&c.LogFormat, "log-format", "text", "text (klog) or json (one JSON object per line, for log pipelines)")
	c.Webhook.Flags(fs)
	c.DataPlane.flags(fs)
	fs.StringVar(&c.HAProxy.Dir, "haproxy-dir", "", "state directory of a locally owned HAProxy (default "+DefaultHAProxyDir()+"); when attaching (--haproxy-socket), where the server-state file and listener map go (default: --haproxy-config's directory, which that HAProxy reads them from)")
	fs.StringVar(&c.HAProxy.Binary, "haproxy-binary", "haproxy", "HAProxy executable")
	fs.StringVar(&c.HAProxy.AdminSocket, "haproxy-socket", "", "attach to an existing HAProxy: its admin stats socket")
	fs.StringVar(&c.HAProxy.MasterSocket, "haproxy-master-socket", "", "attach: the master CLI socket (for hitless reloads)")
	fs.StringVar(&c.HAProxy.ConfigFile, "haproxy-config", "", "attach: the config file zerodrop owns (loaded by that HAProxy)")
	fs.StringVar(&c.HAProxy.ValidateSocket, "haproxy-validate-socket", "", "attach: the validation socket of the zerodrop haproxy command (DIR/"+haproxy.ValidationSocketName+"): each configuration is checked there before a reload (haproxy -c), in HAProxy's container and charged to its memory (181 MiB at 10,000 listeners); empty: haproxy -c runs as this process's child")
	fs.BoolVar(&c.HAProxy.NoStrictLimits, "haproxy-no-strict-limits", false, "let HAProxy start when it cannot raise its open-file limit to what its listeners and checked servers need (a warning instead of a refused reload)")
	// Old workers: each keeps a whole configuration while a connection is
	// on it. A count bound is what makes HAProxy's memory boundable; by
	// default it is derived from HAProxy's memory limit and the
	// configuration's size, so that a small cluster ends no WebSocket for
	// it. The time bound is off: it would end WebSockets that memory does
	// not need ended.
	fs.IntVar(&c.HAProxy.MaxOldWorkers, "haproxy-max-old-workers", 0, "at most this many old HAProxy workers (each holding the connections opened before a reload, and a whole configuration) live at once: a reload ends (SIGTERM) the workers that outlived more reloads, with their connections (HAProxy's mworker-max-reloads); 0: as many as fit in --haproxy-memory-limit at each reload, or no bound without it")
	fs.Var((*quantityBytes)(&c.HAProxy.MemoryLimit), "haproxy-memory-limit", "HAProxy's memory limit (its container's, e.g. 1280Mi): with --haproxy-max-old-workers 0, each reload bounds the old workers to what fits in it beside the configuration (about 5 MiB + 29 KiB per listener each); empty: none")
	fs.DurationVar(&c.HAProxy.HardStopAfter, "haproxy-hard-stop-after", 0, "an old HAProxy worker exits this long after the reload that replaced it, ending the connections still on it (HAProxy's hard-stop-after); 0: no bound in time")
	fs.BoolVar(&c.HAProxy.StopOnClose, "haproxy-stop-on-exit", false, "stop the owned HAProxy when the controller exits (default: keep serving)")
	c.HAProxyRead.flags(fs, "haproxy", DefaultHAProxyRead, "one runtime snapshot serves every read for 250 ms and no quota is spent: the limit only guards the controller's own CPU")
	c.Azure.flags(fs)
	c.AWS.flags(fs)
}

// Validate checks the configuration without connecting to anything: a bad
// flag is a usage error, reported before the cluster or the cloud is asked.
func (c *Config) Validate() error {
	if s := service.SyncMode(c.Sync); s != service.SyncIncremental && s != service.SyncFull {
		return fmt.Errorf("--sync must be %q or %q, not %q", service.SyncIncremental, service.SyncFull, c.Sync)
	}
	if c.AddressPool != "" {
		if _, err := netip.ParsePrefix(c.AddressPool); err != nil {
			return fmt.Errorf("--address-pool: %w", err)
		}
	}
	if _, err := model.ParseAddressMap(c.AddressMap); err != nil {
		return fmt.Errorf("--backend-address-map: %w", err)
	}
	if c.KubeProxyHealthzPort < 0 || c.KubeProxyHealthzPort > 65535 {
		return fmt.Errorf("--kube-proxy-healthz-port %d: want 0 (probe the nodePort) to 65535", c.KubeProxyHealthzPort)
	}
	if err := c.validateBindAddresses(); err != nil {
		return err
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("--max-ports-per-service, --service-check-limit, --node-check-budget: %w", err)
	}
	if c.LogFormat != "" && c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("--log-format must be text or json, not %q", c.LogFormat)
	}
	if c.KubeProxyMargin < 0 || c.KubeProxyFallback < 0 {
		return fmt.Errorf("--kube-proxy-sync-margin %s, --kube-proxy-fallback-delay %s: want durations of at least 0", c.KubeProxyMargin, c.KubeProxyFallback)
	}
	if c.Webhook.Enabled {
		if err := c.Webhook.Validate(); err != nil {
			return err
		}
	}
	if err := c.DataPlane.validate(c); err != nil {
		return err
	}
	switch c.Provider {
	case "haproxy":
		if err := c.HAProxyRead.validate("haproxy"); err != nil {
			return err
		}
	case "azure":
		if c.Override.Provider != nil {
			// A caller's own provider: the flags that make one are not read.
			break
		}
		if err := c.Azure.validate(); err != nil {
			return fmt.Errorf("--provider azure: %w", err)
		}
	case "aws":
		if c.Override.Provider != nil {
			break
		}
		if err := c.AWS.validate(); err != nil {
			return fmt.Errorf("--provider aws: %w", err)
		}
	default:
		return fmt.Errorf("--provider %q is not supported (haproxy, azure, aws)", c.Provider)
	}
	return nil
}

// flagSet is the command's flags, bound to c: the controller's own, and
// klog's (-v, --vmodule, …), which parse but stay out of --help: they are
// for debugging, and --log-format is the documented switch.
func (c *Config) flagSet(out io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet("zerodrop controller", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.SortFlags = false
	c.Flags(fs)
	kfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(kfs)
	fs.AddGoFlagSet(kfs)
	kfs.VisitAll(func(f *flag.Flag) { _ = fs.MarkHidden(f.Name) })
	return fs
}

// ParseArgs parses the command's arguments as Run does, without running
// anything: the install's tests parse the manifests' arguments with it, so
// a renamed or mistyped flag fails there rather than in a rollout.
func ParseArgs(args []string) (Config, error) {
	var cfg Config
	fs := cfg.flagSet(io.Discard)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	cfg.AddressPoolGiven = fs.Changed("address-pool")
	return cfg, nil
}

// Run parses args and runs the controller until ctx is done.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := Config{LogOutput: stderr}
	fs := cfg.flagSet(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "zerodrop controller: %v\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "zerodrop controller: unexpected arguments %v\n", fs.Args())
		return 2
	}
	cfg.AddressPoolGiven = fs.Changed("address-pool")
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "zerodrop controller: %v\n", err)
		return 2
	}
	if cfg.LogFormat == "json" {
		klog.SetLogger(newLogger(cfg))
	}
	setMemoryLimit(newLogger(cfg).WithName("zerodrop"), cgroupRoot) // the process's own: not in RunConfig, which tests run in-process
	if err := RunConfig(ctx, cfg); err != nil {
		fmt.Fprintf(stderr, "zerodrop controller: %v\n", err)
		return 1
	}
	return 0
}

// newLogger is klog's logger, or with --log-format json a JSON one. Run,
// the command, also routes klog's own output (client-go's, leader
// election's) through the JSON one; RunConfig does not, because klog's
// logger is process-wide and may be set only before anything logs.
func newLogger(cfg Config) logr.Logger {
	if cfg.LogFormat != "json" {
		return klog.NewKlogr()
	}
	out := cfg.LogOutput
	if out == nil {
		out = os.Stderr
	}
	return logr.FromSlogHandler(slog.NewJSONHandler(out, nil))
}

// RunConfig runs the controller until ctx is done: Build, then Start.
func RunConfig(ctx context.Context, cfg Config) error {
	in, err := Build(ctx, cfg)
	if err != nil {
		return err
	}
	return in.Start(ctx)
}
