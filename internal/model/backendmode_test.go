package model

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestSettleBackendMode: a Service gets its provider's default backend
// mode when no annotation names one, except IP mode where node mode cannot
// serve it or where the load balancer already serves it in IP mode (an
// upgrade from a version whose default was IP mode moves nothing). The
// annotation always wins.
func TestSettleBackendMode(t *testing.T) {
	const node1, node2 = "10.240.0.4", "10.240.0.5"
	nodes := map[string]bool{node1: true, node2: true}
	listener := ListenerName("shop", "web", corev1.ProtocolTCP, 80)
	held := func(bs ...Backend) *Served {
		return &Served{Backends: func(l string) []Backend {
			if l == listener {
				return bs
			}
			return nil
		}, Node: func(a string) bool { return nodes[a] }}
	}
	pod := Backend{Address: "10.244.1.7", Port: 8080, State: Active}
	nodeAt := func(addr string, port int32) Backend { return Backend{Address: addr, Port: port, State: Active} }
	noNodePort := func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 0 }
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		def         BackendMode
		mutate      []func(*corev1.Service)
		served      *Served
		want        BackendMode
		kept        string
		note        bool
	}{
		{name: "HAProxy default, nothing served", def: IPMode, want: IPMode},
		{name: "HAProxy default, served in IP mode", def: IPMode, served: held(pod), want: IPMode},
		{name: "empty default is IP mode", def: "", want: IPMode},
		{name: "Azure default, new Service", def: NodeMode, served: held(), want: NodeMode, note: true},
		{name: "Azure default, not read yet", def: NodeMode, want: NodeMode, note: true},
		{name: "Azure default, served by an earlier version in IP mode", def: NodeMode, served: held(pod), want: IPMode, kept: KeptServed, note: true},
		{name: "Azure default, a pod draining in the IP-mode pool", def: NodeMode,
			served: held(Backend{Address: "10.244.1.7", Port: 8080, State: Draining}), want: IPMode, kept: KeptServed, note: true},
		{name: "Azure default, served in node mode", def: NodeMode, served: held(nodeAt(node1, 30080), nodeAt(node2, 30080)), want: NodeMode, note: true},
		{name: "Azure default, node mode at an edited nodePort", def: NodeMode, served: held(nodeAt(node1, 31000)), want: NodeMode, note: true},
		{name: "Azure default, IP-mode pool emptied", def: NodeMode, served: held(), want: NodeMode, note: true},
		{name: "Azure default, no nodePort", def: NodeMode, mutate: []func(*corev1.Service){noNodePort}, want: IPMode, kept: KeptNoNodePort, note: true},
		{name: "annotation ip on Azure", annotations: map[string]string{AnnotationBackendMode: "ip"}, def: NodeMode, want: IPMode},
		{name: "annotation node moves an IP-mode Service", annotations: map[string]string{AnnotationBackendMode: "node"}, def: NodeMode,
			served: held(pod), want: NodeMode},
		{name: "annotation node on HAProxy", annotations: map[string]string{AnnotationBackendMode: "node"}, def: IPMode, want: NodeMode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseServiceConfig(tc.annotations, tc.def)
			if err != nil {
				t.Fatal(err)
			}
			got := cfg.Settle(svc(tc.mutate...), tc.served)
			if got.Mode != tc.want || got.ModeKept != tc.kept {
				t.Errorf("mode %q kept %q, want %q kept %q", got.Mode, got.ModeKept, tc.want, tc.kept)
			}
			if note := got.ModeNote(); (note != "") != tc.note {
				t.Errorf("condition note %q, want one: %t", note, tc.note)
			}
			// Settled again with what it then writes, the mode stays: the
			// rule never flips back.
			if again := got.Settle(svc(tc.mutate...), tc.served); again.Mode != got.Mode {
				t.Errorf("settled twice: %q, then %q", got.Mode, again.Mode)
			}
		})
	}
}

// TestNodeAddressesMapped: a node's address is read as the load balancer
// holds it (mapped, canonical), so Served.Node recognises node mode behind
// an address map.
func TestNodeAddressesMapped(t *testing.T) {
	n := &corev1.Node{Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.4"}}}}
	m, err := ParseAddressMap("10.0.0.0/24=192.168.5.0/24")
	if err != nil {
		t.Fatal(err)
	}
	got := NodeAddresses([]*corev1.Node{n}, m)
	if !got["192.168.5.4"] || len(got) != 1 {
		t.Errorf("node addresses %v, want the mapped 192.168.5.4", got)
	}
}
