package azure

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/azuredp"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	azureprovider "zerodrop.dev/zerodrop/internal/provider/azure"
)

// The Azure resources of a traffic run (one emulator per run).
const (
	azSub                       = "00000000-0000-0000-0000-00000000aa02"
	azGroup                     = "rg-zerodrop-traffic"
	azVNet, azSubnetName, azNSG = "vnet-lab", "frontends", "nsg-lab"
	azLB                        = "lb-traffic" // zerodrop's
	azLocation                  = "westeurope"
	azureInternalAnnotation     = "service.beta.kubernetes.io/azure-load-balancer-internal"
	// ccmLB is the load balancer cloud-provider-azure writes for the
	// cluster "kubernetes"'s internal Services.
	ccmLB = "kubernetes-internal"
	// ccmReplicas are the CCM processes a run starts, as the lab's
	// controller Deployments have two replicas.
	ccmReplicas = 2
	// drainTimeout is zerodrop's drain timeout, which the lab leaves at
	// its default.
	drainTimeout = model.DefaultDrainTimeout
)

func azSubnetID() string {
	return "/subscriptions/" + azSub + "/resourceGroups/" + azGroup + "/providers/Microsoft.Network/virtualNetworks/" +
		azVNet + "/subnets/" + azSubnetName
}

// run is a run's emulated Azure: the emulator, its HTTPS endpoint, the
// data plane, the forwarders to it and the CCM processes.
type run struct {
	w   *World
	env world.Env

	mu         sync.Mutex // served: the agent reads Forwards while Start runs
	emu        *azurearm.Emulator
	served     *azurearm.Served
	kubeconfig string // the API server as the root namespace reaches it
	dp         *azuredp.DataPlane
	stopLag    func()
	ccm        ccmSet
	svc        types.NamespacedName // the workload's Service
	act        actRecord            // the act's stretch of the record (act.go)
	othersErr  error                // creating the other Services (services.go)
	shifts     map[int]int          // moves of each other Service's endpoints (churn.go)
}

// NewRun is the world's side of one run.
func (w *World) NewRun(env world.Env) world.Run { return &run{w: w, env: env} }

// Start starts the run's emulated Azure: the emulator with the run's
// frontend pool as its subnet, its endpoint and forwarders, the data plane
// on the load-balancer host, and in the upstream, recipe and gates modes
// the CCM.
func (a *run) Start(ctx context.Context) (err error) {
	o, env := a.w.opts, a.env
	pool := netip.MustParsePrefix(cluster.FrontendPool(env.ID))
	a.emu = azurearm.New(azurearm.Options{Seed: uint64(env.ID), AddressPrefix: pool, WriteLatency: o.ARMLatency})
	a.emu.SeedSubnet(azSub, azGroup, azVNet, azSubnetName, pool)
	a.emu.SeedSecurityGroup(azSub, azGroup, azNSG)
	a.seedLayout()
	if err := os.MkdirAll(env.Dir, 0o755); err != nil {
		return err
	}
	served, err := a.emu.ServeTLS(filepath.Join(env.Dir, "emulator-ca.pem"))
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.served = served
	a.mu.Unlock()
	compute, err := a.seedCompute(ctx)
	if err != nil {
		return err
	}
	var ipconfigs azuredp.IPConfigs
	if compute != nil {
		ipconfigs = compute
	}
	a.dp, err = azuredp.New(ctx, azuredp.Config{NS: env.Net.LB.Netns, Emulator: a.emu, ResourceGroup: azGroup,
		Propagation: o.ARMLatency + o.LBPropagation, Compute: ipconfigs, PoolFlows: o.PoolFlows,
		Logf: func(format string, args ...any) {
			env.Logf("%s: azure data plane: "+format, append([]any{env.Name}, args...)...)
		}})
	if err != nil {
		return err
	}
	var health azurearm.RuleHealth
	health, a.stopLag = a.dp.LaggedRuleHealth(o.HealthLag)
	a.emu.SetRuleHealth(health)
	if !a.ccmRuns() {
		return nil
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
// the next run's cloud-controller-manager would take this one's classless
// Services too. Its writer is stopped: its cleanup finalizer goes
// with the run.
func (a *run) Stop() {
	for _, c := range a.ccm.procs {
		if err := c.proc.Stop(); err != nil {
			a.env.Logf("%s: cloud-controller-manager: %v", a.env.Name, err)
		}
	}
	if a.svc.Name != "" {
		a.deleteServices()
	}
	if a.stopLag != nil {
		a.stopLag()
	}
	if a.dp != nil {
		if err := a.dp.Close(); err != nil {
			a.env.Progressf("%s: azure data plane teardown: %v", a.env.Name, err)
		}
	}
	if a.served != nil {
		_ = a.served.Close()
	}
}

var _ world.ProbeDecider = (*run)(nil)

// ProbeDecidesLocal: zerodrop's Azure provider leaves a node-mode Local
// Service's nodes to the probe (what its own provider says, so the lab's
// steady check follows the code it measures).
func (a *run) ProbeDecidesLocal() bool {
	return provider.ProbeDecidesLocal(&azureprovider.Provider{})
}

// OwnsWriters: in the upstream and recipe modes the writer is the CCM
// alone; in gates mode zerodrop's controller pods run beside it.
func (a *run) OwnsWriters() bool { return a.env.Mode.NodeBacked() && !a.env.Mode.Gated() }

// ControllerArgs are zerodrop's controller flags for the run's emulator:
// `zerodrop lab azure-controller`, the command's own wiring with the
// emulator's endpoint and credential, and production defaults otherwise.
func (a *run) ControllerArgs([]string) []string {
	env := a.env
	lb := azLB // the load balancer zerodrop's controllers write
	if a.w.opts.SharedLB {
		lb = ccmLB
	}
	args := []string{
		"lab", Command, "--emulator=" + a.served.URL, "--emulator-ca=" + a.served.CAFile,
		"--provider=azure",
		"--kubeconfig=" + env.Net.Kubeconfig,
		"--load-balancer-class=" + env.Class,
		"--azure-subscription-id=" + azSub, "--azure-resource-group=" + azGroup,
		"--azure-load-balancers=" + lb, "--azure-subnet-id=" + azSubnetID(), "--azure-location=" + azLocation,
	}
	if env.Mode == report.ModeGates {
		// The gates read the CCM's load balancer for the run's
		// gate-only Service.
		args = append(args, "--azure-gate-only-load-balancers="+ccmLB)
	}
	return args
}

// Service adds what the Service needs on emulated Azure: internal
// frontends for the CCM (azuredp programs private frontends only), the
// gate-only annotation in gates mode, and zerodrop's backend mode
// (backendMode).
func (a *run) Service(svc *corev1.Service) {
	a.svc = types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	if a.env.Mode.NodeBacked() {
		svc.Annotations[azureInternalAnnotation] = "true"
	}
	if a.env.Mode == report.ModeGates {
		svc.Annotations[model.AnnotationGateOnly] = "true"
	}
	if a.env.Mode == report.ModeZerodrop {
		backendMode(svc.Annotations)
	}
}

// backendMode sets the workload's backend mode for zerodrop's own load
// balancer on Azure, whose provider defaults to node mode
// (azure.Provider.DefaultBackendMode): --backend ip (the scenarios leave
// the annotation out) asks for IP mode by the annotation, and --backend
// node (the scenarios' annotation node) runs without one, so that it
// measures node mode as it ships, by the default. A test holds the
// default at node mode, or --backend node would measure something else.
func backendMode(annotations map[string]string) {
	switch model.BackendMode(annotations[model.AnnotationBackendMode]) {
	case "", model.IPMode:
		annotations[model.AnnotationBackendMode] = string(model.IPMode)
	case model.NodeMode:
		delete(annotations, model.AnnotationBackendMode)
	}
}

// ServiceCreated creates the run's other Services (services.go) beside
// the workload's.
func (a *run) ServiceCreated(*corev1.Service) {
	a.othersErr = a.createOthers(context.Background())
}

// Forwards: zerodrop's controller pods reach the run's ARM emulator on
// their loopback, as they reach the API server.
func (a *run) Forwards() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.served == nil {
		return nil
	}
	return []string{strings.TrimPrefix(a.served.URL, "https://")}
}

// Writes are the ARM writes the emulator accepted so far (every writer's).
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

// Backends reads the Service's first port's rule from the data plane (the
// rule that takes the Service's address and port, whoever named it): each
// backend address active unless its admin state is Down (zerodrop's
// drain), healthy when its probe is up.
func (a *run) Backends(_ context.Context, addr string) ([]provider.BackendStatus, error) {
	if addr == "" {
		return nil, fmt.Errorf("no ingress address yet")
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, err
	}
	port, bs, err := a.dp.HealthAt(ap.Addr(), ap.Port())
	if err != nil {
		return nil, err
	}
	out := make([]provider.BackendStatus, 0, len(bs))
	for _, b := range bs {
		state := model.Active
		if b.AdminDown() {
			state = model.Draining
		}
		out = append(out, provider.BackendStatus{
			Listener: a.env.Listener,
			Address:  b.Addr.String(), Port: int32(port),
			State: state, Healthy: b.ProbeUp, HealthKnown: true,
		})
	}
	return out, nil
}

// OnWrite watches the ARM writes as they land (world.WriteWatcher): f
// runs inside the emulator's write, once it has changed the emulator's
// state and before its answer goes back, so a writer killed from f sends
// nothing more of its plan. The verb is the write's method and resource,
// from the emulator's record (written before f runs).
func (a *run) OnWrite(f func(verb string)) {
	if f == nil {
		a.emu.OnWrite(nil)
		return
	}
	_, since := a.emu.Calls(0)
	var mu sync.Mutex
	a.emu.OnWrite(func() {
		mu.Lock()
		calls, next := a.emu.Calls(since)
		since = next
		mu.Unlock()
		verb := "ARM write"
		for i := len(calls) - 1; i >= 0; i-- {
			if calls[i].Write() {
				verb = calls[i].Method + " " + calls[i].Kind + "/" + calls[i].Resource
				break
			}
		}
		f(verb)
	})
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
