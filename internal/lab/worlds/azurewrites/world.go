package azurewrites

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider/azure"
)

// The Azure lab's world: Services and the EndpointSlices the lab publishes
// for them (no pods: traffic through the emulator means nothing), and what
// the emulated load balancers must hold once the controllers have converged.

const (
	// azureDrainTimeout is every Service's zerodrop.dev/drain-timeout: ARM
	// reports no connection counts, so a draining address stays this long.
	azureDrainTimeout = "2s"
	// azureChangedInterval is the health-check interval the churn sets.
	azureChangedInterval = "5s"
	// azureDefaultIntervalMillis is zerodrop's default probe interval.
	azureDefaultIntervalMillis = 2000
	azureEndpoints             = 3
)

// azureRetry retries a lab write that met a conflict (the controllers patch
// the Services' status meanwhile). client-go's DefaultRetry gives up after
// five tries within about 50ms, which a loaded machine can exhaust; this
// retries for about half a minute.
var azureRetry = wait.Backoff{Steps: 20, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.1, Cap: 2 * time.Second}

// azureSvc is what the lab wants of one Service.
type azureSvc struct {
	index     int
	name, lb  string
	https     bool   // second port 443 → 8443
	interval  string // zerodrop.dev/health-check-interval, "" for the default
	next      int    // next endpoint address
	endpoints []string
	// restart-idle's and churn's Services: backends are the nodes
	// (zerodrop's node mode; the CCM's nodeIP pools),
	// externalTrafficPolicy Local when local.
	nodeMode, local bool
	// shift moves the endpoints to other nodes: endpoint i is on
	// labNodes[(i+shift) mod 3].
	shift int
	// ccmConfig is the load balancer configuration the CCM's Service names
	// (service.beta.kubernetes.io/azure-load-balancer-configurations, with
	// multiple standard load balancers); "" lets the CCM choose.
	ccmConfig string
}

func newAzureSvc(i int, lbs []string) *azureSvc {
	s := &azureSvc{index: i, name: fmt.Sprintf("svc-%02d", i), lb: lbs[i%len(lbs)]}
	for len(s.endpoints) < azureEndpoints {
		s.endpoints = append(s.endpoints, s.address())
	}
	return s
}

// address is a fresh endpoint address of the Service.
func (s *azureSvc) address() string {
	s.next++
	return fmt.Sprintf("10.%d.%d.%d", 20+s.index/250, s.index%250, 1+(s.next-1)%250)
}

// replaceOne replaces the oldest endpoint, as a rolling update does.
func (s *azureSvc) replaceOne() {
	s.endpoints = append(s.endpoints[1:], s.address())
}

func (s *azureSvc) ports() []int32 {
	if s.https {
		return []int32{80, 443}
	}
	return []int32{80}
}

func (s *azureSvc) object(ns, class string) *corev1.Service {
	ann := map[string]string{
		"zerodrop.dev/drain-timeout": azureDrainTimeout,
		azure.AnnotationLoadBalancer: s.lb,
	}
	if s.interval != "" {
		ann["zerodrop.dev/health-check-interval"] = s.interval
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.name, Annotations: ann},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: ptr.To(class),
			Selector: map[string]string{"app": s.name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	if s.https {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443), Protocol: corev1.ProtocolTCP})
	}
	if s.nodeMode {
		ann[model.AnnotationBackendMode] = "node"
	}
	if s.local {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	return svc
}

func (s *azureSvc) slice(ns string) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: s.name, Labels: map[string]string{discoveryv1.LabelServiceName: s.name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)},
			{Name: ptr.To("https"), Port: ptr.To[int32](8443), Protocol: ptr.To(corev1.ProtocolTCP)},
		},
	}
	for i, a := range s.endpoints {
		// On the nodes in turn: a Local Service's nodes with endpoints are
		// what cloud-provider-azure's multiple-SLB mode puts in its pool.
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, NodeName: ptr.To(s.nodeOf(i).name),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return sl
}

// nodeOf is the node of the Service's i-th endpoint.
func (s *azureSvc) nodeOf(i int) labNode { return labNodes[(i+s.shift)%len(labNodes)] }

// endpointNodeIPs is the set of addresses of the nodes with an endpoint.
func (s *azureSvc) endpointNodeIPs() map[string]bool {
	out := map[string]bool{}
	for i := range s.endpoints {
		out[s.nodeOf(i).ip] = true
	}
	return out
}

// ccmObject is the Service as the CCM's: no class, internal, on the load
// balancer configuration it names if any.
func (s *azureSvc) ccmObject(ns string) *corev1.Service {
	svc := s.object(ns, "")
	svc.Spec.LoadBalancerClass = nil
	svc.Annotations = map[string]string{ccmInternalAnnotation: "true"}
	if s.ccmConfig != "" {
		svc.Annotations[ccmConfigAnnotation] = s.ccmConfig
	}
	return svc
}

// The CCM's annotations (cloud-provider-azure pkg/consts/consts.go).
const (
	ccmInternalAnnotation = "service.beta.kubernetes.io/azure-load-balancer-internal"
	ccmConfigAnnotation   = "service.beta.kubernetes.io/azure-load-balancer-configurations"
)

// create creates the Service as zerodrop's and its EndpointSlice.
func (s *azureSvc) create(ctx context.Context, c client.Client, ns, class string) error {
	return s.createAs(ctx, c, s.object(ns, class))
}

// createAs creates svc (the Service as zerodrop's, object, or as the
// CCM's, ccmObject) and the Service's EndpointSlice.
func (s *azureSvc) createAs(ctx context.Context, c client.Client, svc *corev1.Service) error {
	if err := c.Create(ctx, svc); err != nil {
		return fmt.Errorf("create service %s/%s: %w", svc.Namespace, s.name, err)
	}
	if err := c.Create(ctx, s.slice(svc.Namespace)); err != nil {
		return fmt.Errorf("create endpointslice %s/%s: %w", svc.Namespace, s.name, err)
	}
	return nil
}

// pushEndpoints writes the Service's endpoints to its EndpointSlice.
func (s *azureSvc) pushEndpoints(ctx context.Context, c client.Client, ns string) error {
	want := s.slice(ns)
	err := retry.RetryOnConflict(azureRetry, func() error {
		var sl discoveryv1.EndpointSlice
		if err := c.Get(ctx, client.ObjectKeyFromObject(want), &sl); err != nil {
			return err
		}
		sl.Endpoints = want.Endpoints
		return c.Update(ctx, &sl)
	})
	if err != nil {
		return fmt.Errorf("update endpointslice %s/%s: %w", ns, s.name, err)
	}
	return nil
}

// pushSpec writes want's ports and annotations (the Service's as zerodrop's,
// object, or as the CCM's, ccmObject); the controllers patch the status
// meanwhile, hence the retry.
func pushSpec(ctx context.Context, c client.Client, want *corev1.Service) error {
	err := retry.RetryOnConflict(azureRetry, func() error {
		var svc corev1.Service
		if err := c.Get(ctx, client.ObjectKeyFromObject(want), &svc); err != nil {
			return err
		}
		svc.Annotations = want.Annotations
		svc.Spec.Ports = want.Spec.Ports
		return c.Update(ctx, &svc)
	})
	if err != nil {
		return fmt.Errorf("update service %s/%s: %w", want.Namespace, want.Name, err)
	}
	return nil
}

// intervalMillis is the probe interval the Service asks for.
func (s *azureSvc) intervalMillis() int {
	if s.interval == azureChangedInterval {
		return 5000
	}
	return azureDefaultIntervalMillis
}

// azureConverged compares the emulated load balancers with what the
// Services ask for: every port has its rule, its probe has the Service's
// interval, its pool holds exactly the Service's endpoints in service (admin
// state None: nothing left draining), and no port the Service dropped keeps a
// rule. It returns what differs, "" when nothing does.
func azureConverged(emu *azurearm.Emulator, group, ns string, svcs []*azureSvc) string {
	docs := map[string]*armnetwork.LoadBalancer{}
	for _, s := range svcs {
		lb, ok := docs[s.lb]
		if !ok {
			if lb, ok = emu.LoadBalancer(group, s.lb); !ok {
				return "load balancer " + s.lb + " does not exist"
			}
			docs[s.lb] = lb
		}
		for _, port := range []int32{80, 443} {
			rule := ruleName(ns, s, port)
			if !slices.Contains(s.ports(), port) {
				if findRule(lb, rule) != nil {
					return rule + " still exists"
				}
				continue
			}
			r, problem := checkRule(lb, rule, s)
			if problem != "" {
				return problem
			}
			var have []string
			for _, a := range poolAddresses(lb, lastSegment(r.Properties.BackendAddressPool.ID)) {
				have = append(have, a[0]+"="+a[1])
			}
			var want []string
			for _, e := range s.endpoints {
				want = append(want, e+"="+string(armnetwork.LoadBalancerBackendAddressAdminStateNone))
			}
			slices.Sort(have)
			slices.Sort(want)
			if !slices.Equal(have, want) {
				return fmt.Sprintf("%s has %v, want %v", rule, have, want)
			}
		}
	}
	return ""
}

// ruleName is the name of the rule zerodrop writes for s's port.
func ruleName(ns string, s *azureSvc, port int32) string {
	return fmt.Sprintf("zd-%s.%s.tcp-%d", ns, s.name, port)
}

// checkRule finds rule on lb and says what is wrong with it for s: "" when
// it has a pool and probes at the interval s asks for.
func checkRule(lb *armnetwork.LoadBalancer, rule string, s *azureSvc) (*armnetwork.LoadBalancingRule, string) {
	r := findRule(lb, rule)
	if r == nil || r.Properties == nil || r.Properties.BackendAddressPool == nil || r.Properties.Probe == nil {
		return r, rule + " is missing"
	}
	if probe := lastSegment(r.Properties.Probe.ID); !strings.HasPrefix(probe, fmt.Sprintf("%s.%d-", rule, s.intervalMillis())) {
		return r, fmt.Sprintf("%s probes with %s, want interval %dms", rule, probe, s.intervalMillis())
	}
	return r, ""
}

// poolAddresses lists the addresses of pool on lb with their admin states,
// as they are (a duplicate stays two entries).
func poolAddresses(lb *armnetwork.LoadBalancer, pool string) [][2]string {
	var out [][2]string
	if p := findPool(lb, pool); p != nil && p.Properties != nil {
		for _, a := range p.Properties.LoadBalancerBackendAddresses {
			out = append(out, [2]string{ptr.Deref(a.Properties.IPAddress, ""), string(ptr.Deref(a.Properties.AdminState, ""))})
		}
	}
	return out
}

func findRule(lb *armnetwork.LoadBalancer, name string) *armnetwork.LoadBalancingRule {
	if lb.Properties == nil {
		return nil
	}
	for _, r := range lb.Properties.LoadBalancingRules {
		if strings.EqualFold(ptr.Deref(r.Name, ""), name) {
			return r
		}
	}
	return nil
}

func findPool(lb *armnetwork.LoadBalancer, name string) *armnetwork.BackendAddressPool {
	for _, p := range lb.Properties.BackendAddressPools {
		if strings.EqualFold(ptr.Deref(p.Name, ""), name) {
			return p
		}
	}
	return nil
}

func lastSegment(id *string) string {
	s := ptr.Deref(id, "")
	return s[strings.LastIndexByte(s, '/')+1:]
}

// azureWriteBounds is what the diff between the emulated load balancers and
// what the Services ask for calls for, in writes. A writer makes one plan,
// and so one write (a pool's PUT, or the load balancer's when more than a
// pool changes), per load balancer: one to fix rules and probes, add what is
// missing and start draining what leaves (admin state Down); then, once the
// drain timeout has passed, at least one and at most one per leaving address
// (their drains may end on different polls) to remove what drained. A load
// balancer that holds what it should needs none. A writer that rewrites
// what is already right, or leaves something wrong, falls outside [lo, hi].
func azureWriteBounds(emu *azurearm.Emulator, group, ns string, svcs []*azureSvc) (lo, hi int, err error) {
	type lbDiff struct {
		first   bool
		leaving int
	}
	diffs := map[string]*lbDiff{}
	docs := map[string]*armnetwork.LoadBalancer{}
	pools := map[string]bool{}
	for _, s := range svcs {
		lb, ok := docs[s.lb]
		if !ok {
			if lb, ok = emu.LoadBalancer(group, s.lb); !ok {
				return 0, 0, fmt.Errorf("load balancer %s does not exist", s.lb)
			}
			docs[s.lb], diffs[s.lb] = lb, &lbDiff{}
		}
		d := diffs[s.lb]
		for _, port := range []int32{80, 443} {
			rule := ruleName(ns, s, port)
			if !slices.Contains(s.ports(), port) {
				d.first = d.first || findRule(lb, rule) != nil
				continue
			}
			r, problem := checkRule(lb, rule, s)
			if problem != "" {
				d.first = true
				continue
			}
			name := lastSegment(r.Properties.BackendAddressPool.ID)
			if pools[s.lb+"/"+name] {
				continue
			}
			pools[s.lb+"/"+name] = true
			have := map[string]string{}
			for _, a := range poolAddresses(lb, name) {
				have[a[0]] = a[1]
			}
			first, leaving := poolDiff(have, s.endpoints)
			d.first, d.leaving = d.first || first, d.leaving+leaving
		}
	}
	for _, d := range diffs {
		l, h := lbWriteBounds(d.first, d.leaving)
		lo, hi = lo+l, hi+h
	}
	return lo, hi, nil
}

// poolDiff compares a pool holding have (address → admin state) with want,
// all in service: whether a first write must add an address, put one back
// in service or start one's drain, and how many addresses leave.
func poolDiff(have map[string]string, want []string) (first bool, leaving int) {
	for _, a := range want {
		if st, ok := have[a]; !ok || st != string(armnetwork.LoadBalancerBackendAddressAdminStateNone) {
			first = true
		}
	}
	for a, st := range have {
		if slices.Contains(want, a) {
			continue
		}
		leaving++
		if st != string(armnetwork.LoadBalancerBackendAddressAdminStateDown) {
			first = true
		}
	}
	return first, leaving
}

// lbWriteBounds is azureWriteBounds for one load balancer.
func lbWriteBounds(first bool, leaving int) (lo, hi int) {
	if first {
		lo, hi = 1, 1
	}
	if leaving > 0 {
		lo, hi = lo+1, hi+leaving
	}
	return lo, hi
}
