package podgate

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/model"
)

func TestVerdict(t *testing.T) {
	served := lbtarget.Target{Listener: "a", Registered: true, Healthy: true}
	cases := []struct {
		name    string
		targets []lbtarget.Target
		want    bool
		reason  string
	}{
		{"no load balancer selects the pod", nil, true, "NoLoadBalancer"},
		{"registered and healthy", []lbtarget.Target{served}, true, "LoadBalancerServing"},
		{"not registered", []lbtarget.Target{{Listener: "a"}}, false, ""},
		{"registered, not healthy yet", []lbtarget.Target{{Listener: "a", Registered: true}}, false, ""},
		{"served by one of two load balancers", []lbtarget.Target{served, {Listener: "b"}}, false, ""},
		{"one of two ports not healthy", []lbtarget.Target{served, {Listener: "b", Registered: true}}, false, ""},
		{"served by both", []lbtarget.Target{served, {Listener: "b", Registered: true, Healthy: true}}, true, "LoadBalancerServing"},
		{"node mode, Cluster: node registered, not healthy", []lbtarget.Target{{Listener: "a", Registered: true, Node: true}}, false, ""},
		{"node mode, Local: node registered and active, not healthy", []lbtarget.Target{{Listener: "a", Registered: true, Node: true, NodeOnly: true, State: model.Active}}, true, "LoadBalancerServing"},
		{"node mode, Local: node registered, drained (no local endpoint yet)", []lbtarget.Target{{Listener: "a", Registered: true, Node: true, NodeOnly: true, State: model.Draining}}, false, ""},
		{"node mode, Local: node not registered", []lbtarget.Target{{Listener: "a", Node: true, NodeOnly: true}}, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, reason, _ := verdict(tc.targets)
			if got != tc.want || reason != tc.reason {
				t.Errorf("verdict = %v %q, want %v %q", got, reason, tc.want, tc.reason)
			}
		})
	}
}

func TestPending(t *testing.T) {
	base := func() *corev1.Pod {
		return &corev1.Pod{
			Spec:   corev1.PodSpec{ReadinessGates: []corev1.PodReadinessGate{{ConditionType: ConditionType}}},
			Status: corev1.PodStatus{PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}},
		}
	}
	cases := []struct {
		name   string
		mutate func(*corev1.Pod)
		want   bool
	}{
		{"gated, addressed, gate not set", func(*corev1.Pod) {}, true},
		{"gate False", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: ConditionType, Status: corev1.ConditionFalse}}
		}, true},
		{"gate True already", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: ConditionType, Status: corev1.ConditionTrue}}
		}, false},
		{"no gate", func(p *corev1.Pod) { p.Spec.ReadinessGates = nil }, false},
		{"another gate only", func(p *corev1.Pod) {
			p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/other"}}
		}, false},
		{"no address yet", func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "", nil }, false},
		{"terminating", func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.Now()) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := base()
			tc.mutate(p)
			if got := pending(p); got != tc.want {
				t.Errorf("pending = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSetCondition(t *testing.T) {
	pod := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: corev1.ContainersReady, Status: corev1.ConditionFalse},
		{Type: ConditionType, Status: corev1.ConditionFalse},
	}}}
	setCondition(pod, corev1.PodCondition{Type: ConditionType, Status: corev1.ConditionTrue})
	setCondition(pod, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse})
	want := []corev1.PodCondition{
		{Type: corev1.ContainersReady, Status: corev1.ConditionFalse},
		{Type: ConditionType, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse},
	}
	if len(pod.Status.Conditions) != len(want) {
		t.Fatalf("conditions %+v, want %+v", pod.Status.Conditions, want)
	}
	for i := range want {
		if pod.Status.Conditions[i] != want[i] {
			t.Errorf("condition %d = %+v, want %+v", i, pod.Status.Conditions[i], want[i])
		}
	}
}
