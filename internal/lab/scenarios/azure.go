package scenarios

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/azuredp"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// The traffic lab on emulated Azure (Options.Azure, `zerodrop lab
// --provider azure-emulator` with a traffic scenario): each run gets an ARM
// emulator of its own, served over HTTPS on the root namespace's loopback,
// and the load-balancer host programmed from it by azuredp, which forwards
// packets as Azure's Standard Load Balancer does. The writer is the real
// cloud-controller-manager of cloud-provider-azure in the upstream and
// recipe modes (two processes with its own leader election), and in
// zerodrop mode zerodrop's controller pods with the Azure provider (`zerodrop
// lab azure-controller`: the command's wiring with the emulator's endpoint
// and credential), reaching the emulator through a forwarder on each node's
// loopback. ARM's write latency, the data plane's further propagation and
// the rule-health operation's lag are AzureOptions.

// AzureOptions are the Azure traffic lab's clocks.
type AzureOptions struct {
	// ARMLatency is how long a write's long-running operation takes
	// (the emulator's WriteLatency): a GET shows provisioningState
	// Updating until then.
	ARMLatency time.Duration
	// LBPropagation is how long after that the data plane applies the
	// change (no client can observe it).
	LBPropagation time.Duration
	// HealthLag is how old the rule-health operation's answer is.
	HealthLag time.Duration
	// CCMBinary is cloud-provider-azure's cloud-controller-manager
	// (default: built or taken from the cache).
	CCMBinary string
}

// Clock is the point's clocks as the report names them (no grace period:
// that is the run's).
func (o AzureOptions) Clock() report.AzureClock {
	return report.AzureClock{ARMLatencySeconds: o.ARMLatency.Seconds(), LBPropagationSeconds: o.LBPropagation.Seconds(),
		HealthLagSeconds: o.HealthLag.Seconds()}
}

// DefaultARMLatency is --arm-latency's default: an ARM load-balancer PUT
// takes about 5–12 s (cloud-provider-azure #5909; azure-libraries-for-net
// #1021), docs/azure.md.
const DefaultARMLatency = 10 * time.Second

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
)

// ccmResources are the run's Azure resources, as its CCMs' cloud config
// names them.
var ccmResources = ccm.Resources{SubscriptionID: azSub, ResourceGroup: azGroup, Location: azLocation,
	VNet: azVNet, Subnet: azSubnetName, SecurityGroup: azNSG}

func azSubnetID() string {
	return "/subscriptions/" + azSub + "/resourceGroups/" + azGroup + "/providers/Microsoft.Network/virtualNetworks/" +
		azVNet + "/subnets/" + azSubnetName
}

// azureLB is a run's emulated Azure: the emulator, its HTTPS endpoint, the
// data plane, the forwarders to it and the CCM processes.
type azureLB struct {
	emu        *azurearm.Emulator
	served     *azurearm.Served
	kubeconfig string // the API server as the root namespace reaches it
	dp         *azuredp.DataPlane
	stopLag    func()
	ccms       []*ccmProc
}

func (r *run) azure() bool { return r.lab.opts.Azure != nil }

// startAzure starts the run's emulated Azure: the emulator with the run's
// frontend pool as its subnet, its endpoint and forwarders, the data plane
// on the load-balancer host, and in the upstream and recipe modes the CCM.
func (r *run) startAzure(ctx context.Context) (err error) {
	o := r.lab.opts.Azure
	pool := netip.MustParsePrefix(cluster.FrontendPool(r.id))
	a := &azureLB{emu: azurearm.New(azurearm.Options{Seed: uint64(r.id), AddressPrefix: pool, WriteLatency: o.ARMLatency})}
	a.emu.SeedSubnet(azSub, azGroup, azVNet, azSubnetName, pool)
	a.emu.SeedSecurityGroup(azSub, azGroup, azNSG)
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return err
	}
	if a.served, err = a.emu.ServeTLS(filepath.Join(r.dir, "emulator-ca.pem")); err != nil {
		return err
	}
	// The agent reads it for the controller pods' forwarders.
	r.lab.curMu.Lock()
	r.az = a
	r.lab.curMu.Unlock()
	a.dp, err = azuredp.New(ctx, azuredp.Config{NS: r.lab.net.LB.Netns, Emulator: a.emu, ResourceGroup: azGroup,
		Propagation: o.ARMLatency + o.LBPropagation,
		Logf: func(format string, args ...any) {
			r.lab.logf("%s: azure data plane: "+format, append([]any{r.name()}, args...)...)
		}})
	if err != nil {
		return err
	}
	var health azurearm.RuleHealth
	health, a.stopLag = a.dp.LaggedRuleHealth(o.HealthLag)
	a.emu.SetRuleHealth(health)
	if !r.mode.NodeBacked() {
		return nil
	}
	server := r.lab.cp.Config.Host
	if !strings.Contains(server, "://") {
		server = "https://" + server
	}
	if a.kubeconfig, err = cluster.WriteKubeconfig(r.lab.cp.Config, server, filepath.Join(r.dir, "kubeconfig")); err != nil {
		return err
	}
	for range controllerReplicas {
		if err := r.startCCM(); err != nil {
			return err
		}
	}
	return nil
}

// stopAzure stops everything startAzure started.
func (r *run) stopAzure() {
	a := r.az
	if a == nil {
		return
	}
	for _, c := range a.ccms {
		if err := c.proc.Stop(); err != nil {
			r.lab.logf("%s: cloud-controller-manager: %v", r.name(), err)
		}
	}
	if a.stopLag != nil {
		a.stopLag()
	}
	if a.dp != nil {
		if err := a.dp.Close(); err != nil {
			r.lab.progressf("%s: azure data plane teardown: %v", r.name(), err)
		}
	}
	if a.served != nil {
		_ = a.served.Close()
	}
}

// azureArgs are zerodrop's controller flags for the run's emulator:
// `zerodrop lab azure-controller`, the command's own wiring with the
// emulator's endpoint and credential, and production defaults otherwise.
func (cs *controllers) azureArgs() []string {
	r := cs.run
	args := []string{
		"lab", "azure-controller", "--emulator=" + r.az.served.URL, "--emulator-ca=" + r.az.served.CAFile,
		"--provider=azure",
		"--kubeconfig=" + r.lab.net.Kubeconfig,
		"--load-balancer-class=" + r.class,
		"--azure-subscription-id=" + azSub, "--azure-resource-group=" + azGroup,
		"--azure-load-balancers=" + azLB, "--azure-subnet-id=" + azSubnetID(), "--azure-location=" + azLocation,
	}
	if r.mode == report.ModeGates {
		// The gates read the CCM's load balancer for the run's
		// gate-only Service.
		args = append(args, "--azure-gate-only-load-balancers="+ccmLB)
	}
	return args
}

// azureServiceAnnotations are what the Service needs on emulated Azure:
// internal frontends for the CCM (azuredp programs private frontends only).
func (r *run) azureServiceAnnotations(svc *corev1.Service) {
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	if r.mode.NodeBacked() {
		svc.Annotations[azureInternalAnnotation] = "true"
	}
	if r.mode == report.ModeGates {
		svc.Annotations[model.AnnotationGateOnly] = "true"
	}
}

// azureWrites is the ARM writes the emulator accepted so far (every
// writer's).
func (r *run) azureWrites() int64 {
	calls, _ := r.az.emu.Calls(0)
	var n int64
	for _, c := range calls {
		if c.Write() {
			n++
		}
	}
	return n
}

// azureBackends reads the Service's first port's rule from the data plane
// (the rule that takes the Service's address and port, whoever named it):
// each backend address active unless its admin state is Down (zerodrop's
// drain), healthy when its probe is up.
func (r *run) azureBackends() ([]provider.BackendStatus, error) {
	if r.addr == "" {
		return nil, fmt.Errorf("no ingress address yet")
	}
	ap, err := netip.ParseAddrPort(r.addr)
	if err != nil {
		return nil, err
	}
	port, bs, err := r.az.dp.HealthAt(ap.Addr(), ap.Port())
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
			Listener: model.ListenerName(r.ns, appName, corev1.ProtocolTCP, servicePort),
			Address:  b.Addr.String(), Port: int32(port),
			State: state, Healthy: b.ProbeUp, HealthKnown: true,
		})
	}
	return out, nil
}

// azureReturnTable is the nodes' routing table for answers to the client
// of connections azuredp translated; azureDirectMark marks the connections a
// floating-IP rule delivered (addressed to a frontend), whose answers go
// straight to the client.
const (
	azureReturnTable = "100"
	azureDirectMark  = "0x5a"
)

// azureReturnRoutes route the nodes' answers to the client through the
// load-balancer host, which must translate them back, when a rule without
// floating IP translated the connection (azuredp DNATs; on Azure the
// backend's host does it). A connection a floating-IP rule delivered
// unchanged (addressed to the frontend, which kube-proxy translates) is
// marked as it arrives and answered directly (Azure's direct server
// return): its answers leave kube-proxy's translation with the frontend's
// address, which the load-balancer host would drop as its own. The choice
// is made before routing, by the connection's mark, because kube-proxy
// gives an answer its frontend source only after routing. Made once per
// lab; the network's teardown removes the namespaces with them.
func (l *lab) azureReturnRoutes(ctx context.Context) error {
	client := l.net.Client.IP.String() + "/32"
	ruleset := fmt.Sprintf(`table ip zerodrop_lab_azure {
	chain prerouting {
		type filter hook prerouting priority mangle; policy accept;
		ct state new ip daddr %s ct mark set %s
		ct direction reply ct mark %s meta mark set meta mark or %s
	}
}
`, cluster.FrontendNet, azureDirectMark, azureDirectMark, azureDirectMark)
	path := filepath.Join(l.dir, "azure-direct-return.nft")
	if err := os.WriteFile(path, []byte(ruleset), 0o644); err != nil {
		return err
	}
	for _, n := range l.net.Net.Nodes {
		if err := n.Run(ctx, "nft", "-f", path); err != nil {
			return fmt.Errorf("node %d: direct-return marks: %w", n.Index, err)
		}
		for _, args := range [][]string{
			{"rule", "add", "pref", "1000", "fwmark", azureDirectMark + "/" + azureDirectMark, "lookup", "main"},
			{"rule", "add", "pref", "1001", "to", client, "lookup", azureReturnTable},
			{"route", "add", "default", "via", l.net.LB.IP.String(), "table", azureReturnTable},
		} {
			if err := n.Run(ctx, "ip", args...); err != nil {
				return fmt.Errorf("node %d: return route: %w", n.Index, err)
			}
		}
	}
	return nil
}
