package cluster

import (
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// The lab's scheduler refuses a node where a pod's host ports are taken, as
// kube-scheduler's NodePorts filter does (kubernetes
// pkg/scheduler/framework/plugins/nodeports, with HostPortInfo's conflict
// rule in pkg/scheduler/framework/types.go): a host-network pod whose
// containers declare a port, beside another on the same node, stays Pending.
// That is what stalls a DaemonSet surge of such pods, and the lab must see it
// rather than start both.

// errNodePorts is kube-scheduler's reason, word for word (nodeports.ErrReason).
const errNodePorts = "node(s) didn't have free ports for the requested pod ports"

// hostPort is one port a pod holds on its node's addresses.
type hostPort struct {
	ip       string // "0.0.0.0": every address of the node
	protocol corev1.Protocol
	port     int32
}

func (p hostPort) String() string {
	return fmt.Sprintf("%s %s", p.protocol, net.JoinHostPort(p.ip, strconv.Itoa(int(p.port))))
}

// bindAll is the scheduler's "every address" (DefaultBindAllHostIP): an empty
// hostIP means it. Like the scheduler, the lab does not read "::" as a
// wildcard.
const bindAll = "0.0.0.0"

// hostPorts are the host ports pod asks for: each container's hostPort, and
// for a host-network pod each containerPort (the API server defaults
// hostPort to it there; counted here even when a client skipped the
// defaulting), with an empty hostIP as 0.0.0.0 and an empty protocol as TCP,
// as HostPortInfo sanitizes them. The containers are the scheduler's: the
// pod's containers and its restartable (sidecar) init containers.
func hostPorts(pod *corev1.Pod) []hostPort {
	containers := append([]corev1.Container{}, pod.Spec.Containers...)
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			containers = append(containers, c)
		}
	}
	var out []hostPort
	for _, c := range containers {
		for _, p := range c.Ports {
			port := p.HostPort
			if port == 0 && pod.Spec.HostNetwork {
				port = p.ContainerPort
			}
			if port <= 0 {
				continue
			}
			hp := hostPort{ip: p.HostIP, protocol: p.Protocol, port: port}
			if hp.ip == "" {
				hp.ip = bindAll
			}
			if hp.protocol == "" {
				hp.protocol = corev1.ProtocolTCP
			}
			out = append(out, hp)
		}
	}
	return out
}

// collides is HostPortInfo.CheckConflict: the same protocol and port, and
// the same address or either of them every address.
func (p hostPort) collides(q hostPort) bool {
	return p.protocol == q.protocol && p.port == q.port && (p.ip == q.ip || p.ip == bindAll || q.ip == bindAll)
}

// portsFree reports whether pod's host ports are free on a node that runs
// onNode: a pod there holds its ports until it has terminated (phase
// Succeeded or Failed) or is gone; one being deleted still holds them. When
// they are not free, reason is the scheduler's, with the port and its
// holder.
func portsFree(pod *corev1.Pod, onNode []*corev1.Pod) (ok bool, reason string) {
	want := hostPorts(pod)
	if len(want) == 0 {
		return true, ""
	}
	for _, other := range onNode {
		if other.UID == pod.UID && other.Namespace == pod.Namespace && other.Name == pod.Name {
			continue
		}
		if other.Status.Phase == corev1.PodSucceeded || other.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, held := range hostPorts(other) {
			for _, w := range want {
				if w.collides(held) {
					return false, fmt.Sprintf("%s (%s: %s/%s holds %s)", errNodePorts, w, other.Namespace, other.Name, held)
				}
			}
		}
	}
	return true, ""
}
