package service

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/model"
)

func TestReplicaViews(t *testing.T) {
	desired := &model.LoadBalancer{Key: "ns/web", Listeners: []model.Listener{
		{Name: "ns/web/tcp-80", Address: "10.0.0.1", Port: 80},
		{Name: "ns/web/tcp-443", Address: "10.0.0.1", Port: 443},
		{Name: "ns/other/tcp-80", Address: "10.0.0.2", Port: 80},
	}}
	both := &model.LoadBalancer{Listeners: desired.Listeners[:2]}
	oneMissing := &model.LoadBalancer{Listeners: desired.Listeners[:1]}
	moved := &model.LoadBalancer{Listeners: []model.Listener{{Name: "ns/web/tcp-80", Address: "10.0.0.9", Port: 80}, desired.Listeners[1]}}
	cases := []struct {
		desc      string
		v         replicaViews
		waiting   []string
		listening []string
	}{
		{"no replica", replicaViews{}, []string{"no data-plane replica counts"}, nil},
		{"both serve", replicaViews{names: []string{"a", "b"}, lbs: map[string]*model.LoadBalancer{"a": both, "b": both}}, nil, []string{"a", "b"}},
		{"one lacks a listener", replicaViews{names: []string{"a", "b"}, lbs: map[string]*model.LoadBalancer{"a": both, "b": oneMissing}},
			[]string{"b (listener ns/web/tcp-443 not there yet)"}, []string{"a", "b"}},
		{"one at another address", replicaViews{names: []string{"a"}, lbs: map[string]*model.LoadBalancer{"a": moved}},
			[]string{"a (listener ns/web/tcp-80 not there yet)"}, []string{"a"}},
		{"one has nothing", replicaViews{names: []string{"a", "b"}, lbs: map[string]*model.LoadBalancer{"a": both, "b": nil}},
			[]string{"b (listener ns/web/tcp-80 not there yet)"}, []string{"a"}},
		{"one unread", replicaViews{names: []string{"a", "b"}, lbs: map[string]*model.LoadBalancer{"a": nil}, unread: map[string]error{"b": errors.New("refused")}},
			[]string{"a (listener ns/web/tcp-80 not there yet)", "b (not answering: refused)"}, []string{"b (not answering)"}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			if got := tc.v.waiting("ns/web", desired); !reflect.DeepEqual(got, tc.waiting) {
				t.Errorf("waiting = %q, want %q", got, tc.waiting)
			}
			if got := tc.v.listening("ns/web"); !reflect.DeepEqual(got, tc.listening) {
				t.Errorf("listening = %q, want %q", got, tc.listening)
			}
		})
	}
}

func TestStatusAddress(t *testing.T) {
	pool := netip.MustParsePrefix("10.0.0.0/24")
	svc := &corev1.Service{}
	if _, err := statusAddress(svc, pool); !errors.Is(err, errNoAddress) {
		t.Fatalf("no ingress: %v, want errNoAddress", err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "lb.example"}, {IP: "10.0.0.7"}}
	if a, err := statusAddress(svc, pool); err != nil || a != "10.0.0.7" {
		t.Fatalf("got %q, %v; want 10.0.0.7", a, err)
	}
	// Whoever can write a Service's status could otherwise make every edge
	// node bind any address (a node's, the API server's): a replica binds
	// only addresses of the pool the control role allocates from.
	for _, ip := range []string{"10.0.1.7", "192.168.0.1", "fd00::1", "not-an-ip"} {
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
		if a, err := statusAddress(svc, pool); err == nil || errors.Is(err, errNoAddress) {
			t.Errorf("status address %s outside the pool %s: got %q, %v; want an error naming the pool", ip, pool, a, err)
		}
	}
	// No pool configured (a replica started without --address-pool): as before.
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.168.0.1"}}
	if a, err := statusAddress(svc, netip.Prefix{}); err != nil || a != "192.168.0.1" {
		t.Fatalf("no pool: got %q, %v; want 192.168.0.1", a, err)
	}
}
