package cluster

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestPortsFree: the lab's scheduler refuses a node where a pod's host
// ports are held, by kube-scheduler's NodePorts rule.
func TestPortsFree(t *testing.T) {
	// hostNet is a host-network pod whose container declares ports (no
	// hostPort: the port is a host port all the same).
	hostNet := func(name string, ports ...corev1.ContainerPort) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "zerodrop-system", Name: name, UID: types.UID(name)},
			Spec: corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{Name: "c", Ports: ports}}}}
	}
	podNet := func(name string, ports ...corev1.ContainerPort) *corev1.Pod {
		p := hostNet(name, ports...)
		p.Spec.HostNetwork = false
		return p
	}
	tcp := func(port int32) corev1.ContainerPort { return corev1.ContainerPort{ContainerPort: port} }
	udp := func(port int32) corev1.ContainerPort {
		return corev1.ContainerPort{ContainerPort: port, Protocol: corev1.ProtocolUDP}
	}
	on := func(ip string, p corev1.ContainerPort) corev1.ContainerPort { p.HostIP = ip; return p }
	explicit := func(container, host int32) corev1.ContainerPort {
		return corev1.ContainerPort{ContainerPort: container, HostPort: host}
	}
	phase := func(p *corev1.Pod, ph corev1.PodPhase) *corev1.Pod { p.Status.Phase = ph; return p }
	deleting := func(p *corev1.Pod) *corev1.Pod { p.DeletionTimestamp = &metav1.Time{}; return p }
	sidecar := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.InitContainers = []corev1.Container{{Name: "s", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Ports: p.Spec.Containers[0].Ports}}
		p.Spec.Containers[0].Ports = nil
		return p
	}

	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		onNode []*corev1.Pod
		free   bool
	}{
		{"empty node", hostNet("new", tcp(9093)), nil, true},
		{"same port, protocol and address", hostNet("new", tcp(9093)), []*corev1.Pod{hostNet("old", tcp(9093))}, false},
		{"TCP spelled out and defaulted", hostNet("new", tcp(9093)),
			[]*corev1.Pod{hostNet("old", corev1.ContainerPort{ContainerPort: 9093, Protocol: corev1.ProtocolTCP})}, false},
		{"another port", hostNet("new", tcp(9093)), []*corev1.Pod{hostNet("old", tcp(9094))}, true},
		{"another protocol", hostNet("new", tcp(9093)), []*corev1.Pod{hostNet("old", udp(9093))}, true},
		{"every address against one", hostNet("new", tcp(9093)), []*corev1.Pod{hostNet("old", on("10.0.0.1", tcp(9093)))}, false},
		{"one address against every", hostNet("new", on("10.0.0.1", tcp(9093))), []*corev1.Pod{hostNet("old", tcp(9093))}, false},
		{"0.0.0.0 spelled out", hostNet("new", on("0.0.0.0", tcp(9093))), []*corev1.Pod{hostNet("old", on("10.0.0.2", tcp(9093)))}, false},
		{"two different addresses", hostNet("new", on("10.0.0.1", tcp(9093))), []*corev1.Pod{hostNet("old", on("10.0.0.2", tcp(9093)))}, true},
		{"the same address", hostNet("new", on("10.0.0.1", tcp(9093))), []*corev1.Pod{hostNet("old", on("10.0.0.1", tcp(9093)))}, false},
		{"pod network, container ports only", podNet("new", tcp(9093)), []*corev1.Pod{podNet("old", tcp(9093))}, true},
		{"pod network beside a host-network pod", podNet("new", tcp(9093)), []*corev1.Pod{hostNet("old", tcp(9093))}, true},
		{"explicit hostPort against a host-network port", podNet("new", explicit(8080, 9093)), []*corev1.Pod{hostNet("old", tcp(9093))}, false},
		{"explicit hostPorts, the host side collides", podNet("new", explicit(8080, 9093)), []*corev1.Pod{podNet("old", explicit(8081, 9093))}, false},
		{"explicit hostPorts, only the container side is the same", podNet("new", explicit(8080, 9093)), []*corev1.Pod{podNet("old", explicit(8080, 9094))}, true},
		{"no ports declared (the chart's data plane)", hostNet("new"), []*corev1.Pod{hostNet("old", tcp(9093))}, true},
		{"beside a pod that declares none", hostNet("new", tcp(9093)), []*corev1.Pod{hostNet("old")}, true},
		{"the holder succeeded", hostNet("new", tcp(9093)), []*corev1.Pod{phase(hostNet("old", tcp(9093)), corev1.PodSucceeded)}, true},
		{"the holder failed", hostNet("new", tcp(9093)), []*corev1.Pod{phase(hostNet("old", tcp(9093)), corev1.PodFailed)}, true},
		{"the holder runs", hostNet("new", tcp(9093)), []*corev1.Pod{phase(hostNet("old", tcp(9093)), corev1.PodRunning)}, false},
		{"the holder is being deleted, still running", hostNet("new", tcp(9093)), []*corev1.Pod{deleting(phase(hostNet("old", tcp(9093)), corev1.PodRunning))}, false},
		{"a sidecar's port", hostNet("new", tcp(9093)), []*corev1.Pod{sidecar(hostNet("old", tcp(9093)))}, false},
		{"the pod itself (bound, seen again)", hostNet("new", tcp(9093)), []*corev1.Pod{hostNet("new", tcp(9093))}, true},
		{"one of several ports", hostNet("new", tcp(9092), tcp(9093), tcp(9094)),
			[]*corev1.Pod{hostNet("a", tcp(1)), hostNet("b", udp(9094), tcp(9094))}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			free, why := portsFree(tc.pod, tc.onNode)
			if free != tc.free {
				t.Errorf("portsFree = %v (%s), want %v", free, why, tc.free)
			}
			if !free && !strings.HasPrefix(why, "node(s) didn't have free ports for the requested pod ports") {
				t.Errorf("reason %q: want kube-scheduler's NodePorts reason first", why)
			}
		})
	}
}
