package model

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func svc(mutate ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, NodePort: 30080},
		}},
	}
	for _, m := range mutate {
		m(s)
	}
	return s
}

type ep struct {
	addr                        string
	ready, serving, terminating *bool
	node                        string
}

func epSlice(port int32, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, e := range eps {
		d := discoveryv1.Endpoint{Addresses: []string{e.addr},
			Conditions: discoveryv1.EndpointConditions{Ready: e.ready, Serving: e.serving, Terminating: e.terminating}}
		if e.node != "" {
			d.NodeName = ptr.To(e.node)
		}
		s.Endpoints = append(s.Endpoints, d)
	}
	return s
}

func node(name, ip string, ready bool, labels map[string]string) *corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}},
		},
	}
}

func withNode(n *corev1.Node, mutate func(*corev1.Node)) *corev1.Node {
	mutate(n)
	return n
}

func defaultConfig() ServiceConfig {
	cfg, _ := ParseServiceConfig(nil, IPMode)
	return cfg
}

func TestDesiredBackends(t *testing.T) {
	yes, no := ptr.To(true), ptr.To(false)
	nodeCfg := defaultConfig()
	nodeCfg.Mode = NodeMode
	tests := []struct {
		name     string
		in       ServiceInput
		opts     DesiredOptions
		want     []string
		probe    Probe
		warnings int
	}{
		{
			name: "ready endpoints are active, nil conditions mean ready",
			in: ServiceInput{Service: svc(), Config: defaultConfig(), Slices: []*discoveryv1.EndpointSlice{
				epSlice(8080, ep{addr: "10.0.0.2", ready: yes}, ep{addr: "10.0.0.1"})}},
			want: []string{"10.0.0.1:8080=active", "10.0.0.2:8080=active"},
		},
		{
			name: "terminating but serving drains, not serving is gone",
			in: ServiceInput{Service: svc(), Config: defaultConfig(), Slices: []*discoveryv1.EndpointSlice{
				epSlice(8080, ep{addr: "10.0.0.1", ready: no, serving: yes, terminating: yes},
					ep{addr: "10.0.0.2", ready: no, serving: no, terminating: yes},
					ep{addr: "10.0.0.3", ready: no})}},
			want: []string{"10.0.0.1:8080=draining"},
		},
		{
			name: "an endpoint in two slices counts once, the ready reading wins",
			in: ServiceInput{Service: svc(), Config: defaultConfig(), Slices: []*discoveryv1.EndpointSlice{
				epSlice(8080, ep{addr: "10.0.0.1", ready: no, serving: yes, terminating: yes}),
				epSlice(8080, ep{addr: "10.0.0.1", ready: yes})}},
			want: []string{"10.0.0.1:8080=active"},
		},
		{
			name: "an endpoint waiting only for zerodrop's gate is registered",
			in: ServiceInput{Service: svc(), Config: defaultConfig(), Slices: []*discoveryv1.EndpointSlice{
				epSlice(8080, ep{addr: "10.0.0.1", ready: no, serving: no}, ep{addr: "10.0.0.2", ready: no, serving: no})}},
			opts: DesiredOptions{GatePending: func(e discoveryv1.Endpoint) bool { return e.Addresses[0] == "10.0.0.1" }},
			want: []string{"10.0.0.1:8080=active"},
		},
		{
			name: "slice port must match the Service port name",
			in: ServiceInput{Service: svc(func(s *corev1.Service) { s.Spec.Ports[0].Name = "web" }), Config: defaultConfig(),
				Slices: []*discoveryv1.EndpointSlice{epSlice(8080, ep{addr: "10.0.0.1"})}},
			want: nil,
		},
		{
			name: "address map",
			in: ServiceInput{Service: svc(), Config: defaultConfig(), Slices: []*discoveryv1.EndpointSlice{
				epSlice(8080, ep{addr: "198.18.0.9"})}},
			opts: DesiredOptions{AddressMap: []AddressMapping{{From: mustPrefix("198.18.0.0/15"), To: mustPrefix("127.18.0.0/15")}}},
			want: []string{"127.18.0.9:8080=active"},
		},
		{
			name: "node mode: not excluded nodes on the nodePort, NotReady ones too",
			in:   ServiceInput{Service: svc(), Config: nodeCfg},
			opts: DesiredOptions{Nodes: []*corev1.Node{
				node("a", "192.0.2.1", true, nil), node("b", "192.0.2.2", false, nil),
				node("c", "192.0.2.3", true, map[string]string{LabelExcludeFromLB: ""})}},
			want: []string{"192.0.2.1:30080=active", "192.0.2.2:30080=active"},
		},
		{
			// KEP-3458: a control-plane partition marks every node Unknown;
			// readiness and cordons must not empty the pool, the probes decide.
			name: "node mode: Unknown, without conditions and cordoned nodes stay",
			in:   ServiceInput{Service: svc(), Config: nodeCfg},
			opts: DesiredOptions{Nodes: []*corev1.Node{
				withNode(node("a", "192.0.2.1", false, nil), func(n *corev1.Node) {
					n.Status.Conditions[0].Status = corev1.ConditionUnknown
				}),
				withNode(node("b", "192.0.2.2", true, nil), func(n *corev1.Node) { n.Status.Conditions = nil }),
				withNode(node("c", "192.0.2.3", false, nil), func(n *corev1.Node) { n.Spec.Unschedulable = true }),
			}},
			want: []string{"192.0.2.1:30080=active", "192.0.2.2:30080=active", "192.0.2.3:30080=active"},
		},
		{
			name: "node mode: excluded, autoscaler-deleted and deleting nodes leave",
			in:   ServiceInput{Service: svc(), Config: nodeCfg},
			opts: DesiredOptions{Nodes: []*corev1.Node{
				node("a", "192.0.2.1", true, map[string]string{LabelExcludeFromLB: "true"}),
				withNode(node("b", "192.0.2.2", true, nil), func(n *corev1.Node) {
					n.Spec.Taints = []corev1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Value: "1700000000", Effect: corev1.TaintEffectNoSchedule}}
				}),
				withNode(node("c", "192.0.2.3", true, nil), func(n *corev1.Node) { n.DeletionTimestamp = &metav1.Time{} }),
				withNode(node("d", "192.0.2.4", true, nil), func(n *corev1.Node) {
					n.Spec.Taints = []corev1.Taint{{Key: "example.com/other", Effect: corev1.TaintEffectNoSchedule}}
				}),
			}},
			want: []string{"192.0.2.4:30080=active"},
		},
		{
			name: "node mode with Local traffic policy probes healthCheckNodePort",
			in: ServiceInput{Service: svc(func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 32000
			}), Config: nodeCfg},
			opts:  DesiredOptions{Nodes: []*corev1.Node{node("a", "192.0.2.1", true, nil)}},
			want:  []string{"192.0.2.1:30080=draining"}, /* no local endpoint */
			probe: Probe{Kind: ProbeHTTP, Port: 32000, Path: "/healthz", IntervalMillis: 2000, Rise: 2, Fall: 3},
		},
		{
			// The last local pod of node a is stopping, b has a pod that is
			// not ready yet, c has none: only b takes new connections; a and c
			// stay registered, drained.
			name: "node mode with Local: nodes without a local endpoint that is not terminating drain",
			in: ServiceInput{Service: svc(func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 32000
			}), Config: nodeCfg, Slices: []*discoveryv1.EndpointSlice{
				epSlice(8080, ep{addr: "10.0.0.1", ready: no, serving: yes, terminating: yes, node: "a"},
					ep{addr: "10.0.1.1", ready: no, node: "b"})}},
			opts: DesiredOptions{Nodes: []*corev1.Node{node("a", "192.0.2.1", true, nil),
				node("b", "192.0.2.2", true, nil), node("c", "192.0.2.3", true, nil)}},
			want:  []string{"192.0.2.1:30080=draining", "192.0.2.2:30080=active", "192.0.2.3:30080=draining"},
			probe: Probe{Kind: ProbeHTTP, Port: 32000, Path: "/healthz", IntervalMillis: 2000, Rise: 2, Fall: 3},
		},
		{
			name: "node mode with Local: a ready sibling keeps the node active",
			in: ServiceInput{Service: svc(func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 32000
			}), Config: nodeCfg, Slices: []*discoveryv1.EndpointSlice{
				epSlice(8080, ep{addr: "10.0.0.1", ready: no, serving: yes, terminating: yes, node: "a"},
					ep{addr: "10.0.0.2", ready: yes, node: "a"})}},
			opts:  DesiredOptions{Nodes: []*corev1.Node{node("a", "192.0.2.1", true, nil)}},
			want:  []string{"192.0.2.1:30080=active"},
			probe: Probe{Kind: ProbeHTTP, Port: 32000, Path: "/healthz", IntervalMillis: 2000, Rise: 2, Fall: 3},
		},
		{
			name: "node mode with Cluster: endpoints do not change node backends",
			in: ServiceInput{Service: svc(), Config: nodeCfg, Slices: []*discoveryv1.EndpointSlice{
				epSlice(8080, ep{addr: "10.0.0.1", ready: no, serving: yes, terminating: yes, node: "a"})}},
			opts:  DesiredOptions{Nodes: []*corev1.Node{node("a", "192.0.2.1", true, nil), node("b", "192.0.2.2", true, nil)}, KubeProxyHealthzPort: 10256},
			want:  []string{"192.0.2.1:30080=active", "192.0.2.2:30080=active"},
			probe: Probe{Kind: ProbeHTTP, Port: 10256, Path: "/healthz", IntervalMillis: 2000, Rise: 2, Fall: 3},
		},
		{
			name:  "node mode with Cluster traffic policy probes kube-proxy's healthz",
			in:    ServiceInput{Service: svc(), Config: nodeCfg},
			opts:  DesiredOptions{Nodes: []*corev1.Node{node("a", "192.0.2.1", true, nil)}, KubeProxyHealthzPort: 10256},
			want:  []string{"192.0.2.1:30080=active"},
			probe: Probe{Kind: ProbeHTTP, Port: 10256, Path: "/healthz", IntervalMillis: 2000, Rise: 2, Fall: 3},
		},
		{
			name: "node mode with Local traffic policy probes healthCheckNodePort, not kube-proxy's healthz",
			in: ServiceInput{Service: svc(func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 32000
			}), Config: nodeCfg},
			opts:  DesiredOptions{Nodes: []*corev1.Node{node("a", "192.0.2.1", true, nil)}, KubeProxyHealthzPort: 10256},
			want:  []string{"192.0.2.1:30080=draining"}, /* no local endpoint */
			probe: Probe{Kind: ProbeHTTP, Port: 32000, Path: "/healthz", IntervalMillis: 2000, Rise: 2, Fall: 3},
		},
		{
			name:  "node mode with Cluster and no healthz port probes the nodePort over TCP",
			in:    ServiceInput{Service: svc(), Config: nodeCfg},
			opts:  DesiredOptions{Nodes: []*corev1.Node{node("a", "192.0.2.1", true, nil)}},
			want:  []string{"192.0.2.1:30080=active"},
			probe: Probe{Kind: ProbeTCP, IntervalMillis: 2000, Rise: 2, Fall: 3},
		},
		{
			name:  "IP mode ignores the healthz port",
			in:    ServiceInput{Service: svc(), Config: defaultConfig(), Slices: []*discoveryv1.EndpointSlice{epSlice(8080, ep{addr: "10.0.0.1"})}},
			opts:  DesiredOptions{KubeProxyHealthzPort: 10256},
			want:  []string{"10.0.0.1:8080=active"},
			probe: Probe{Kind: ProbeTCP, IntervalMillis: 2000, Rise: 2, Fall: 3},
		},
		{
			name:     "unsupported protocol is left out with a warning",
			in:       ServiceInput{Service: svc(func(s *corev1.Service) { s.Spec.Ports[0].Protocol = corev1.ProtocolUDP }), Config: defaultConfig()},
			opts:     DesiredOptions{Unsupported: map[Protocol]bool{UDP: true}},
			warnings: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb, warnings := Desired("k", []ServiceInput{tt.in}, tt.opts)
			if len(warnings) != tt.warnings {
				t.Fatalf("warnings = %v, want %d", warnings, tt.warnings)
			}
			var got []string
			for _, l := range lb.Listeners {
				for _, b := range l.Backends {
					got = append(got, b.ID()+"="+string(b.State))
				}
				if tt.probe.Kind != "" {
					if diff := cmp.Diff(tt.probe, l.Probe); diff != "" {
						t.Errorf("probe (-want +got):\n%s", diff)
					}
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("backends (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDesiredIsOrderIndependent(t *testing.T) {
	a := epSlice(8080, ep{addr: "10.0.0.1"}, ep{addr: "10.0.0.2"})
	b := epSlice(8080, ep{addr: "10.0.0.3"})
	x, _ := Desired("k", []ServiceInput{{Service: svc(), Config: defaultConfig(), Slices: []*discoveryv1.EndpointSlice{a, b}}}, DesiredOptions{})
	y, _ := Desired("k", []ServiceInput{{Service: svc(), Config: defaultConfig(), Slices: []*discoveryv1.EndpointSlice{b, a}}}, DesiredOptions{})
	if !Diff(x, y).Empty() {
		t.Fatal("slice order changed the desired state")
	}
}

func TestParseServiceConfig(t *testing.T) {
	cfg, err := ParseServiceConfig(map[string]string{
		AnnotationBackendMode: "node", AnnotationHealthCheckInterval: "500ms", AnnotationDrainTimeout: "1m",
		AnnotationMaxUnavailable: "2", "other.io/x": "whatever",
	}, IPMode)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != NodeMode || cfg.HealthCheckInterval != 500*time.Millisecond || cfg.DrainTimeout != time.Minute || cfg.MaxUnavailable.IntValue() != 2 {
		t.Errorf("config = %+v", cfg)
	}
	for _, bad := range []map[string]string{
		{AnnotationBackendMode: "pod"},
		{AnnotationHealthCheckInterval: "fast"},
		{AnnotationHealthCheckInterval: "1ms"},
		{AnnotationDrainTimeout: "-1s"},
		{AnnotationMaxUnavailable: "0"},
		{AnnotationMaxUnavailable: "150%"},
		{AnnotationMaxUnavailable: "2147483648"}, // overflows int32
		{AnnotationMaxUnavailable: "99999999999999999999"},
		{AnnotationMaxUnavailable: "-2147483649"},
		{"zerodrop.dev/colour": "blue"},
		{AnnotationGateOnly: "yes"},
	} {
		if _, err := ParseServiceConfig(bad, IPMode); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	if cfg, err := ParseServiceConfig(map[string]string{AnnotationGateOnly: "true"}, IPMode); err != nil || !cfg.GateOnly {
		t.Errorf("gate-only true: %+v, %v", cfg, err)
	}
	if !GateOnly(map[string]string{AnnotationGateOnly: "true"}) || GateOnly(map[string]string{AnnotationGateOnly: "True"}) {
		t.Error(`GateOnly: only "true" asks for the gates only`)
	}
	// An out-of-range count says what the range is, not "not a number".
	_, err = ParseServiceConfig(map[string]string{AnnotationMaxUnavailable: "2147483648"}, IPMode)
	if err == nil || !strings.Contains(err.Error(), "between 1 and 2147483647") {
		t.Errorf("max-unavailable 2147483648: got %v, want an error naming the range", err)
	}
	_, err = ParseServiceConfig(map[string]string{AnnotationBackendMode: "pod", AnnotationDrainTimeout: "x"}, IPMode)
	var inv *InvalidConfigError
	if !errors.As(err, &inv) || len(inv.Problems) != 2 {
		t.Fatalf("want both problems reported at once, got %v", err)
	}
	// The controller follows the endpoints of an invalid Service only when
	// its backend mode is known.
	if !inv.Invalid(AnnotationBackendMode) || !inv.Invalid(AnnotationDrainTimeout) || inv.Invalid(AnnotationMaxUnavailable) {
		t.Errorf("invalid keys = %v", inv.Keys)
	}
	cfg, err = ParseServiceConfig(map[string]string{AnnotationBackendMode: "node", AnnotationDrainTimeout: "x"}, IPMode)
	if err == nil || cfg.Mode != NodeMode || cfg.DrainTimeout != DefaultDrainTimeout {
		t.Errorf("an invalid config keeps the valid values, defaults for the rest: %+v, %v", cfg, err)
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
