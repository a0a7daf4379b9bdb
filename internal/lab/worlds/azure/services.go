package azure

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/model"
)

// The run's other Services (Options.Services): beside the workload's, the
// Services a cluster's load balancer also holds, so that a writer's
// restart meets many Services, as in cloud-provider-azure #10224 (30
// Services, half of them Local). They carry no traffic: each is
// node-backed, its EndpointSlice written by the lab with addresses no pod
// has, on the lab's nodes — two of the three for a Local one, so that one
// node has none. Whose they are follows the mode: zerodrop's (the run's
// class, node mode) or, where the CCM writes, the CCM's (internal, no
// class).

// otherEndpoints is how many endpoints each other Service has.
const otherEndpoints = 3

// otherService is the i-th other Service of the run.
func (a *run) otherService(i int) (*corev1.Service, *discoveryv1.EndpointSlice) {
	name := otherName(i)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: a.env.NS, Name: name, Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
			Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	local := i%2 == 0
	if local {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	if a.ccmRuns() {
		svc.Annotations[azureInternalAnnotation] = "true"
	} else {
		svc.Spec.LoadBalancerClass = ptr.To(a.env.Class)
		svc.Annotations[model.AnnotationBackendMode] = string(model.NodeMode)
	}
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: a.env.NS, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	n := otherEndpoints
	if local {
		n = 2
	}
	shift := a.shifts[i]
	for e := range n {
		// A move (shift) puts the endpoints on other nodes, with new
		// addresses, as a rollout that placed the pods elsewhere would.
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 20+i/250, i%250, 1+(shift*n+e)%250)},
			NodeName:   ptr.To(cluster.NodeName(1 + (e+shift)%len(a.env.Net.Net.Nodes))),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return svc, sl
}

// otherName is the name of the i-th other Service.
func otherName(i int) string { return fmt.Sprintf("svc-%02d", i) }

// createOthers creates the run's other Services and their EndpointSlices.
func (a *run) createOthers(ctx context.Context) error {
	a.shifts = map[int]int{}
	for i := range a.w.opts.Services {
		if err := a.createOther(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// createOther creates other Service i and its EndpointSlice.
func (a *run) createOther(ctx context.Context, i int) error {
	cs := a.env.CP.Client
	svc, sl := a.otherService(i)
	if _, err := cs.CoreV1().Services(a.env.NS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create service %s: %w", svc.Name, err)
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(a.env.NS).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create endpointslice %s: %w", sl.Name, err)
	}
	return nil
}

// waitOthers waits until every other Service of the run has its address.
func (a *run) waitOthers(ctx context.Context) error {
	if a.othersErr != nil || a.w.opts.Services == 0 {
		return a.othersErr
	}
	// Each write may take the ARM latency, and the CCM writes one Service
	// at a time.
	timeout := 2*time.Minute + time.Duration(a.w.opts.Services)*2*(a.w.opts.ARMLatency+a.w.opts.LBPropagation)
	return traffic.WaitFor(ctx, timeout, "every other Service to have its address", func() (bool, string) {
		list, err := a.env.CP.Client.CoreV1().Services(a.env.NS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, s := range list.Items {
			if len(s.Status.LoadBalancer.Ingress) == 0 {
				return false, s.Name + " has no address"
			}
		}
		return true, ""
	})
}

// MaxServices bounds Options.Services: a Standard load balancer holds
// 1,500 rules, and the lab's addresses for the other Services' endpoints
// run out past 250 per second octet long before.
const MaxServices = 500
