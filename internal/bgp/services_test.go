package bgp

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/model"
)

func lbService(name, class string, ips []string, ports ...corev1.ServicePort) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: ports}}
	if class != "" {
		svc.Spec.LoadBalancerClass = ptr.To(class)
	}
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return svc
}

func tcp(p int32) corev1.ServicePort {
	return corev1.ServicePort{Port: p, Protocol: corev1.ProtocolTCP}
}

func describe(cs []Candidate) string {
	s := ""
	for _, c := range cs {
		s += fmt.Sprintf("%s%v ", c.Address, c.Ports)
	}
	return s
}

func TestCandidatesFromServices(t *testing.T) {
	const class = "zerodrop.dev/haproxy"
	gateOnly := lbService("gate", class, []string{"192.0.2.9"}, tcp(80))
	gateOnly.Annotations = map[string]string{model.AnnotationGateOnly: "true"}
	deleting := lbService("deleting", class, []string{"192.0.2.8"}, tcp(80))
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	clusterIP := lbService("cluster-ip", class, []string{"192.0.2.7"}, tcp(80))
	clusterIP.Spec.Type = corev1.ServiceTypeClusterIP
	for _, tc := range []struct {
		name  string
		svcs  []*corev1.Service
		adopt bool
		want  string
	}{
		{"one Service", []*corev1.Service{lbService("web", class, []string{"192.0.2.1"}, tcp(443), tcp(80))}, false, "192.0.2.1[80 443] "},
		{"another class, classless without adopting", []*corev1.Service{lbService("a", "other", []string{"192.0.2.1"}, tcp(80)),
			lbService("b", "", []string{"192.0.2.2"}, tcp(80))}, false, ""},
		{"classless adopted", []*corev1.Service{lbService("b", "", []string{"192.0.2.2"}, tcp(80))}, true, "192.0.2.2[80] "},
		{"no address yet, IPv6, UDP only", []*corev1.Service{lbService("pending", class, nil, tcp(80)),
			lbService("v6", class, []string{"2001:db8::1"}, tcp(80)),
			lbService("udp", class, []string{"192.0.2.3"}, corev1.ServicePort{Port: 53, Protocol: corev1.ProtocolUDP})}, false, ""},
		{"shared address merges ports, sorted by address", []*corev1.Service{lbService("x", class, []string{"192.0.2.10"}, tcp(80)),
			lbService("y", class, []string{"192.0.2.10"}, tcp(8080), tcp(80)), lbService("z", class, []string{"192.0.2.2"}, tcp(22))}, false,
			"192.0.2.2[22] 192.0.2.10[80 8080] "},
		{"gate-only, deleting, not a LoadBalancer", []*corev1.Service{gateOnly, deleting, clusterIP}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := describe(CandidatesFromServices(tc.svcs, class, tc.adopt)); got != tc.want {
				t.Errorf("candidates %q, want %q", got, tc.want)
			}
		})
	}
}

// TestServiceCandidatesFromInformer: the source answers from its informer,
// failing until the first list, then with the Services as they change.
func TestServiceCandidatesFromInformer(t *testing.T) {
	client := fake.NewClientset(lbService("web", "zerodrop.dev/haproxy", []string{"192.0.2.1"}, tcp(80)))
	src, factory := NewServiceCandidates(client, "zerodrop.dev/haproxy", false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := src.Candidates(ctx); err == nil {
		t.Fatal("candidates before the informer listed anything, want an error")
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	got, err := src.Candidates(ctx)
	if err != nil || len(got) != 1 || got[0].Address != netip.MustParseAddr("192.0.2.1") {
		t.Fatalf("candidates %q, %v; want 192.0.2.1", describe(got), err)
	}
	if _, err := client.CoreV1().Services("default").Create(ctx, lbService("api", "zerodrop.dev/haproxy", []string{"192.0.2.2"}, tcp(443)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, _ = src.Candidates(ctx)
		if describe(got) == "192.0.2.1[80] 192.0.2.2[443] " {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("candidates %q after a new Service, want both", describe(got))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
