// Package podcache trims the Pods the controller caches to what zerodrop
// reads of them. Both roles watch every Pod in the cluster (the readiness
// gate, the Service controller's pod watch, the termination gate, the
// data-plane replicas' discovery), and a real cluster's Pods are mostly what
// zerodrop never reads: containers with their env, volumes, probes and
// statuses, and annotations such as kubectl's last-applied-configuration.
// Cached whole, they are what a control role's memory at 10,000 Services is
// made of (issue 49: OOM-killed at the chart's limit while its caches
// synced).
//
// What many pods hold alike (namespaces, node names, label sets, the
// conditions' words, readiness gates) is kept once for them all
// (intern.go): a cached pod must never be changed in place.
//
// Transform keeps an allowlist — a field the API adds later is dropped, not
// kept by default. A reader of cached Pods that needs a field not kept here
// must add it to Transform (and to the test's table): from the cache it
// would read the zero value.
//
// What reads cached Pods (the manager's cache or client; readers through
// the API reader see whole Pods):
//
//   - podgate (the readiness gate): HasGate (spec.readinessGates), pending
//     (status.conditions, metadata.deletionTimestamp, status.podIP),
//     containersReadySince (the ContainersReady condition's
//     lastTransitionTime), and its status patch (MergeFrom with the
//     resourceVersion as optimistic lock). The patch is computed between
//     two copies of the same trimmed Pod, one with the gate's condition set,
//     so only status.conditions (and the resourceVersion) are in it: a
//     field the cache dropped is absent from both and the server keeps it.
//     A JSON merge patch replaces a list whole, so every condition is kept
//     whole (TestGatePatchFromTrimmedPodKeepsTheRest).
//   - lbtarget.Finder (both gates): the Services selecting the pod
//     (metadata.namespace, metadata.labels), the node (spec.nodeName), the
//     pod's endpoint in the slices (metadata.uid, name, status.podIP), its
//     addresses (status.podIP, status.podIPs), when its deletion began
//     (metadata.deletionTimestamp, metadata.deletionGracePeriodSeconds).
//   - drain (the termination gate): metadata.uid, deletionTimestamp,
//     deletionGracePeriodSeconds, status.podIP's family, then the Finder's;
//     its Events on the pod (name, namespace, uid, resourceVersion).
//   - service (both roles): the pod watch (spec.readinessGates, the
//     ContainersReady condition, status.podIP, metadata.labels), stoppedPods
//     (status.phase, status.podIP, status.podIPs); where the role writes a
//     load balancer, gatePending (deletionTimestamp, readinessGates,
//     ContainersReady); in the control role, the replica pods' watch
//     (metadata.namespace, labels, resourceVersion), which looks again at
//     the load balancers waiting for the replicas.
//   - dataplane.Discovery (the control role's replicas; listed by label
//     selector): status.podIP, status.phase, spec.nodeName, metadata.uid,
//     name; its Events on the pod.
//
// Not cached readers: stateauth.Signer lists the data-plane pods through
// the API reader (spec.serviceAccountName is read there, not here); the
// podgate reads a Pod again through the API reader after a conflict; the
// webhook decodes the Pod from the admission request.
package podcache

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Transform is the cache's transform for Pods (cache.ByObject's
// Transform): a new Pod holding only the fields listed in the package
// comment. It replaces the cache's default transform for Pods, and drops
// managedFields as that one does. Anything else is passed through as it
// is (a tombstone, another kind).
func Transform(in any) (any, error) {
	pod, ok := in.(*corev1.Pod)
	if !ok {
		return in, nil
	}
	return trim(pod), nil
}

// trim is the trimmed copy Transform caches. Strings many pods hold alike
// (namespaces, nodes, labels, conditions' words), label sets and readiness
// gates are one value for every pod that has them (shared, below); the rest
// is shared with pod (each its own allocation, so pod's other fields can be
// collected).
func trim(pod *corev1.Pod) *corev1.Pod {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	in := &shared
	out := &corev1.Pod{
		// The kind, as the server sent it (empty from a typed watch).
		TypeMeta: metav1.TypeMeta{Kind: in.str(pod.Kind), APIVersion: in.str(pod.APIVersion)},
		ObjectMeta: metav1.ObjectMeta{
			// Identity: the cache's key and namespace index, every
			// reader's logs, Events on the pod (name, namespace, uid,
			// resourceVersion); uid is how the gates and the replicas'
			// discovery tell a pod from a newer one of the same name.
			Name:      pod.Name,
			Namespace: in.str(pod.Namespace),
			UID:       pod.UID,
			// The informer's and the podgate patch's optimistic lock.
			ResourceVersion: pod.ResourceVersion,
			// Not read today; kept, with creationTimestamp, because they
			// are words of the Pod struct, which holds them anyway, and
			// what a reader of a pod's identity expects to find (a log).
			// ownerReferences, a slice of its own per pod that nothing
			// reads, are not kept.
			Generation:        pod.Generation,
			CreationTimestamp: pod.CreationTimestamp,
			// Which Services select the pod (lbtarget.Finder.Selecting,
			// the Service controller's pod watch); the replicas'
			// discovery lists by label selector.
			Labels: in.labelSet(pod.Labels),
			// When the deletion began and the termination gate's deadline
			// (lbtarget.DeletionStart, drain.deadline); the gates and
			// gatePending skip pods being deleted. No annotation is read
			// from a cached pod: none is kept.
			DeletionTimestamp:          pod.DeletionTimestamp,
			DeletionGracePeriodSeconds: pod.DeletionGracePeriodSeconds,
		},
		Spec: corev1.PodSpec{
			// The node backend in node mode and gate-only Services
			// (lbtarget), local endpoints (localView), a replica's node
			// Lease (dataplane.Discovery).
			NodeName: in.str(pod.Spec.NodeName),
			// Whether the pod carries zerodrop's gate (podgate.HasGate).
			ReadinessGates: in.gates(pod.Spec.ReadinessGates),
		},
		Status: corev1.PodStatus{
			// Terminal phases: stoppedPods, dataplane.Discovery.
			Phase: corev1.PodPhase(in.str(string(pod.Status.Phase))),
			// Whole: the gate's merge patch replaces the list with the
			// cached one plus its own condition (see the package comment);
			// ContainersReady and the gate's condition are read.
			Conditions: in.conditions(pod.Status.Conditions),
			// The pod's backend addresses (lbtarget, stoppedPods), the
			// replica's state endpoint address, the drain's IP family.
			PodIP:  pod.Status.PodIP,
			PodIPs: podIPs(pod.Status.PodIP, pod.Status.PodIPs),
		},
	}
	return out
}

// podIPs is ips with the entry equal to podIP holding podIP's string: the
// first of status.podIPs is status.podIP, decoded twice.
func podIPs(podIP string, ips []corev1.PodIP) []corev1.PodIP {
	if len(ips) == 0 {
		return ips
	}
	out := make([]corev1.PodIP, len(ips))
	for i, ip := range ips {
		if ip.IP == podIP {
			ip.IP = podIP
		}
		out[i] = ip
	}
	return out
}
