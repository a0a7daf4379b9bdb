package aws

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/lab/awsdp"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// nlbAnnotation makes the CCM create a Network Load Balancer (instance
// targets, the CCM's default target type) instead of a classic ELB.
const nlbAnnotation = "service.beta.kubernetes.io/aws-load-balancer-type"

// ccmReplicas are the CCM processes a run starts, as the lab's
// controller Deployments have two replicas.
const ccmReplicas = 2

// run is a run's emulated AWS: the emulator, its HTTPS endpoint, the
// frontend map, the metadata tripwire and the CCM processes.
type run struct {
	world.Defaults
	w   *World
	env world.Env

	emu        *awsapi.Emulator
	served     *awsapi.Served
	kubeconfig string
	dp         *awsdp.DataPlane
	imds       tripwire
	ccm        []*ccmProc
	svc        types.NamespacedName // the workload's Service
	act        actRecord            // the act's stretch of the record (record.go)

	mu        sync.Mutex
	stopWatch func() // OnWrite's poller
	resolved  string // the DNS name Resolve was asked for
	listener  string // the workload's listener, frontend:port, as Backends was last asked
}

// NewRun is the world's side of one run.
func (w *World) NewRun(env world.Env) world.Run { return &run{w: w, env: env} }

// orNone is d for the emulator's options, where 0 means its default and a
// negative duration none.
func orNone(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// Start starts the run's emulated AWS: the emulator holding the lab's
// nodes as instances, served on HTTPS, and the CCM processes.
func (a *run) Start(ctx context.Context) error {
	o, env := a.w.opts, a.env
	vpc, err := labCluster(env.Net.Net.Nodes)
	if err != nil {
		return err
	}
	probes := awsdp.NewProbes(nil)
	// AWS's health-check ranges hold: the CCM writes what the Service's
	// annotations ask (healthcheck.go), and AWS would refuse what is out
	// of range.
	a.emu = awsapi.New(awsapi.Options{RegistrationDelay: orNone(o.RegistrationDelay), Propagation: orNone(o.Propagation),
		Probe: probes.Check, HealthCheckRanges: true})
	ccm.SeedAWS(a.emu, vpc)
	if err := a.setProviderIDs(ctx, vpc); err != nil {
		return err
	}
	if err := os.MkdirAll(env.Dir, 0o755); err != nil {
		return err
	}
	served, err := a.emu.ServeTLS(filepath.Join(env.Dir, "emulator-ca.pem"))
	if err != nil {
		return err
	}
	a.mu.Lock() // the agent reads Forwards while Start runs
	a.served = served
	a.mu.Unlock()
	// The data plane on the load-balancer host: each NLB an address of
	// the run's frontend pool, its targets' health checks sent from there.
	a.dp, err = awsdp.New(ctx, awsdp.Config{NS: env.Net.LB.Netns, Emulator: a.emu, Probes: probes,
		Frontends: netip.MustParsePrefix(cluster.FrontendPool(env.ID)),
		Logf: func(format string, args ...any) {
			env.Logf("%s: aws data plane: "+format, append([]any{env.Name}, args...)...)
		}})
	if err != nil {
		return err
	}
	if err := a.imds.listen(); err != nil {
		return err
	}
	server := env.CP.Config.Host
	if !strings.Contains(server, "://") {
		server = "https://" + server
	}
	if a.kubeconfig, err = cluster.WriteKubeconfig(env.CP.Config, server, filepath.Join(env.Dir, "kubeconfig")); err != nil {
		return err
	}
	for range ccmReplicas {
		if err := a.startCCM(); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops everything Start started, and deletes the run's Services:
// the next run's CCM would take this one's classless Service too.
func (a *run) Stop() {
	a.OnWrite(nil)
	a.act.resets.end()
	for _, c := range a.ccm {
		if err := c.proc.Stop(); err != nil {
			a.env.Logf("%s: aws-cloud-controller-manager: %v", a.env.Name, err)
		}
	}
	if a.svc.Name != "" {
		a.deleteServices()
	}
	if a.dp != nil {
		if err := a.dp.Close(); err != nil {
			a.env.Progressf("%s: aws data plane teardown: %v", a.env.Name, err)
		}
	}
	if a.served != nil {
		_ = a.served.Close()
	}
	a.imds.close()
}

// OwnsWriters: the writer of the upstream and recipe modes is the CCM
// alone; in gates mode zerodrop's controller pods run beside it.
func (a *run) OwnsWriters() bool { return a.env.Mode != report.ModeGates }

// ControllerArgs are gates mode's controller flags: `zerodrop lab
// aws-controller` (controller.go), which runs `zerodrop controller
// --provider aws` with the emulator as its endpoint, the run's cluster ID
// and region, and --aws-propagation the world's AssumedPropagation (the
// assumption docs/aws.md names: by default the emulator's own, true by
// construction; a sweep sets it apart); production defaults otherwise.
func (a *run) ControllerArgs([]string) []string {
	env := a.env
	return []string{
		"lab", Command, "--emulator-ca=" + a.served.CAFile,
		"--provider=aws",
		"--kubeconfig=" + env.Net.Kubeconfig,
		"--load-balancer-class=" + env.Class,
		"--aws-endpoint=" + a.served.URL, "--aws-region=" + awsapi.DefaultRegion, "--aws-cluster-id=" + clusterID,
		"--aws-propagation=" + a.w.opts.AssumedPropagation.String(),
	}
}

// Service asks the CCM for a Network Load Balancer, with the world's
// health check when it has one (healthcheck.go), and in gates mode marks
// the Service gate-only for zerodrop.
func (a *run) Service(svc *corev1.Service) {
	a.svc = types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	svc.Annotations[nlbAnnotation] = "nlb"
	maps.Copy(svc.Annotations, a.w.opts.HealthCheck.annotations())
	if a.env.Mode == report.ModeGates {
		svc.Annotations[model.AnnotationGateOnly] = "true"
	}
}

// Forwards: zerodrop's controller pods reach the run's emulator on their
// loopback, as they reach the API server.
func (a *run) Forwards() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.served == nil || a.env.Mode != report.ModeGates {
		return nil
	}
	return []string{strings.TrimPrefix(a.served.URL, "https://")}
}

var _ world.Resolver = (*run)(nil)

// Resolve is the address the lab's client reaches the load balancer named
// hostname at (the DNS name the CCM wrote into the Service's status): the
// frontend the data plane gave it, once it has seen it.
func (a *run) Resolve(_ context.Context, hostname string) (string, error) {
	addr, ok := a.dp.Frontend(hostname)
	if !ok {
		return "", fmt.Errorf("%s: the data plane has no such load balancer yet", hostname)
	}
	a.mu.Lock()
	first := a.resolved == ""
	a.resolved = hostname
	a.mu.Unlock()
	if first {
		a.env.Progressf("%s: %s resolves to %s", a.env.Name, hostname, addr)
	}
	return addr.String(), nil
}

// Backends are the targets of the listener at addr (a resolved frontend
// and the Service's port) as the data plane has programmed them: the
// emulator's states the propagation time ago.
func (a *run) Backends(_ context.Context, addr string) ([]provider.BackendStatus, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("backends at %q: %w", addr, err)
	}
	a.mu.Lock()
	a.listener = addr
	a.mu.Unlock()
	if err := a.dp.Err(); err != nil {
		return nil, err
	}
	ts, err := a.dp.Targets(ap.Addr(), ap.Port())
	if err != nil {
		return nil, err
	}
	return backendsOf(ts, a.env.Listener), nil
}

// Writes are the writes the emulator accepted so far, every client's (in
// gates mode zerodrop's too, which must be none: record.go).
func (a *run) Writes() (int64, error) {
	calls, _ := a.emu.Calls(0)
	var n int64
	for _, c := range calls {
		if c.Write() {
			n++
		}
	}
	return n, nil
}

// SteadyTimeout: with instance targets a rollout changes no target, but
// the targets' health follows the pods (Local: the health-check node port)
// and a new load balancer's targets wait out the registration delay and
// the slower health check's healthy threshold (the CCM's Cluster check:
// three checks 30 s apart), then the propagation.
func (a *run) SteadyTimeout(int32) time.Duration {
	o := a.w.opts
	return o.RegistrationDelay + o.HealthCheck.turnHealthy() + o.Propagation
}

// workloadTargets are the programmed targets of the workload's listener
// (the one Backends was last asked for).
func (a *run) workloadTargets() ([]awsdp.Target, error) {
	a.mu.Lock()
	addr := a.listener
	a.mu.Unlock()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("the workload's listener %q: %w", addr, err)
	}
	return a.dp.Targets(ap.Addr(), ap.Port())
}

var _ world.WriteWatcher = (*run)(nil)

// OnWrite has f called with each accepted write's operation, polled from
// the record a tenth of a second after it lands (the emulator has no hook
// inside its writes; maintenance only timelines them).
func (a *run) OnWrite(f func(verb string)) {
	a.mu.Lock()
	stop := a.stopWatch
	a.stopWatch = nil
	a.mu.Unlock()
	if stop != nil {
		stop()
	}
	if f == nil || a.emu == nil {
		return
	}
	_, since := a.emu.Calls(0)
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			calls, next := a.emu.Calls(since)
			since = next
			for _, c := range calls {
				if c.Write() {
					f(c.Operation)
				}
			}
		}
	}()
	a.mu.Lock()
	a.stopWatch = func() { close(quit); <-done }
	a.mu.Unlock()
}

// deleteServices deletes the run's Services and the CCM's finalizers on
// them: the run's writers are stopped.
func (a *run) deleteServices() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	services := a.env.CP.Client.CoreV1().Services(a.env.NS)
	list, err := services.List(ctx, metav1.ListOptions{})
	if err != nil {
		a.env.Logf("%s: list the run's Services: %v", a.env.Name, err)
		return
	}
	for _, s := range list.Items {
		_ = services.Delete(ctx, s.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		_, _ = services.Patch(ctx, s.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	}
}

// tripwire listens on loopback where the CCM's metadata client is
// pointed (ccm.AWSConfig.IMDS) and counts the connections it gets: none
// is the proof that the client, switched off, never called (and so never
// 169.254.169.254).
type tripwire struct {
	ln    net.Listener
	conns atomic.Int64
}

func (t *tripwire) listen() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("metadata tripwire: %w", err)
	}
	t.ln = ln
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.conns.Add(1)
			_ = c.Close()
		}
	}()
	return nil
}

func (t *tripwire) url() string { return "http://" + t.ln.Addr().String() }

func (t *tripwire) close() {
	if t.ln != nil {
		_ = t.ln.Close()
	}
}
