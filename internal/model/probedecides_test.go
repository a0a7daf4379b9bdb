package model

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// localSvc is a node-mode Service of externalTrafficPolicy Local.
func localSvc() (*corev1.Service, ServiceConfig) {
	cfg := defaultConfig()
	cfg.Mode = NodeMode
	return svc(func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 32000
	}), cfg
}

// TestDesiredLocalNodesWhereTheProbeDecides: node mode, Local. Without
// DesiredOptions.ProbeDecidesLocal (HAProxy) a node without an endpoint
// that is not terminating is drained in the pool; with it (Azure, as
// cloud-provider-azure's pools) every node stays active and the probe on
// healthCheckNodePort decides. Excluded nodes leave either way.
func TestDesiredLocalNodesWhereTheProbeDecides(t *testing.T) {
	yes, no := ptr.To(true), ptr.To(false)
	excluded := node("x", "192.0.2.9", true, map[string]string{LabelExcludeFromLB: "true"})
	deleting := node("y", "192.0.2.10", true, nil)
	deleting.DeletionTimestamp = &metav1.Time{}
	nodes := []*corev1.Node{node("a", "192.0.2.1", true, nil), node("b", "192.0.2.2", true, nil), excluded, deleting}
	for _, tc := range []struct {
		name              string
		eps               []ep
		writes, probeOnly []string // the backends without, and with, the property
	}{{
		name:      "a node without endpoints",
		eps:       []ep{{addr: "10.0.0.1", ready: yes, node: "a"}},
		writes:    []string{"192.0.2.1:30080=active", "192.0.2.2:30080=draining"},
		probeOnly: []string{"192.0.2.1:30080=active", "192.0.2.2:30080=active"},
	}, {
		name:      "a node whose only endpoint is terminating",
		eps:       []ep{{addr: "10.0.0.1", ready: no, serving: yes, terminating: yes, node: "a"}, {addr: "10.0.1.1", ready: yes, node: "b"}},
		writes:    []string{"192.0.2.1:30080=draining", "192.0.2.2:30080=active"},
		probeOnly: []string{"192.0.2.1:30080=active", "192.0.2.2:30080=active"},
	}, {
		name:      "no endpoint at all",
		writes:    []string{"192.0.2.1:30080=draining", "192.0.2.2:30080=draining"},
		probeOnly: []string{"192.0.2.1:30080=active", "192.0.2.2:30080=active"},
	}, {
		name:      "excluded and deleting nodes leave, with a local endpoint or not",
		eps:       []ep{{addr: "10.0.9.1", ready: yes, node: "x"}, {addr: "10.0.9.2", ready: yes, node: "y"}, {addr: "10.0.0.1", ready: no, node: "a"}},
		writes:    []string{"192.0.2.1:30080=active", "192.0.2.2:30080=draining"},
		probeOnly: []string{"192.0.2.1:30080=active", "192.0.2.2:30080=active"},
	}} {
		for _, decides := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/probe decides %v", tc.name, decides), func(t *testing.T) {
				s, cfg := localSvc()
				in := ServiceInput{Service: s, Config: cfg, Slices: []*discoveryv1.EndpointSlice{epSlice(8080, tc.eps...)}}
				lb, _ := Desired("k", []ServiceInput{in}, DesiredOptions{Nodes: nodes, ProbeDecidesLocal: decides})
				var got []string
				for _, b := range lb.Listeners[0].Backends {
					got = append(got, b.ID()+"="+string(b.State))
				}
				want := tc.writes
				if decides {
					want = tc.probeOnly
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("backends (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestLocalMoveWritesNothingWhereTheProbeDecides: a rollout-local — the
// one pod of a node-mode Local Service replaced by one on another node —
// stepped as the controller steps it (node-mode listeners kept, nothing
// drained yet). Where the probe decides, no step writes anything; without
// (HAProxy), the new pod's node is enabled and the old one's drained.
func TestLocalMoveWritesNothingWhereTheProbeDecides(t *testing.T) {
	yes, no := ptr.To(true), ptr.To(false)
	nodes := []*corev1.Node{node("a", "192.0.2.1", true, nil), node("b", "192.0.2.2", true, nil)}
	old := ep{addr: "10.0.0.1", ready: yes, node: "a"}
	oldStopping := ep{addr: "10.0.0.1", ready: no, serving: yes, terminating: yes, node: "a"}
	starting := ep{addr: "10.0.1.1", ready: no, node: "b"}
	started := ep{addr: "10.0.1.1", ready: yes, node: "b"}
	rollout := [][]ep{{old}, {old, starting}, {old, started}, {oldStopping, started}, {started}}
	for _, tc := range []struct {
		decides bool
		want    []string // every step's writes
	}{
		{decides: true},
		{decides: false, want: []string{
			"update-backend shop/web/tcp-80 192.0.2.2:30080",
			"update-backend shop/web/tcp-80 192.0.2.1:30080",
		}},
	} {
		t.Run(fmt.Sprintf("probe decides %v", tc.decides), func(t *testing.T) {
			s, cfg := localSvc()
			opts := DesiredOptions{Nodes: nodes, ProbeDecidesLocal: tc.decides}
			desired := func(eps []ep) *LoadBalancer {
				lb, _ := Desired("k", []ServiceInput{{Service: s, Config: cfg, Slices: []*discoveryv1.EndpointSlice{epSlice(8080, eps...)}}}, opts)
				return lb
			}
			observed := desired(rollout[0])
			var got []string
			for _, eps := range rollout[1:] {
				next, _ := Step(observed, desired(eps), StepOptions{Keep: func(string) bool { return true }})
				for _, op := range Diff(observed, next).Ops {
					got = append(got, op.String())
				}
				observed = next
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("writes over the rollout (-want +got):\n%s", diff)
			}
		})
	}
}
