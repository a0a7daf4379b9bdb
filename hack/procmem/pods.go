package main

// The Pods (-pods): both roles cache every Pod in the cluster, so a cluster
// without any would understate their memory. Each endpoint is a Pod of its
// own, selected by its Service, Running and Ready at the endpoint's address,
// and its EndpointSlice entry names it (targetRef), as the endpointslice
// controller writes it; as many Pods again are selected by no Service (the
// cluster's other workloads).

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/testutil"
)

var podsFlag = flag.Bool("pods", true, "create a Pod per endpoint (selected by its Service, Ready at the endpoint's address, named by its EndpointSlice entry's targetRef) and as many Pods that no Service selects: both roles cache every Pod; false: no Pods, endpoints without targetRef")

// podWorkers create Pods side by side: two requests each (the Pod, then its
// status), twice as many Pods as endpoints.
const podWorkers = 16

// endpointPodName is the Pod behind Service i's endpoint k (endpointIP(k)):
// a new name for a new address, as a rollout's new Pod has.
func endpointPodName(i, k int) string { return name(i) + "-" + strconv.Itoa(k) }

// createEndpointPod creates the Pod behind Service i's endpoint k, Running
// and Ready at its address (the status written through the status
// subresource, as the kubelet writes it), and returns it with its UID.
func createEndpointPod(ctx context.Context, c client.Client, i, k int) (*corev1.Pod, error) {
	return createPod(ctx, c, endpointPodName(i, k), map[string]string{"app": name(i)}, endpointIP(k))
}

// createUnselectedPod creates the u-th Pod no Service selects.
func createUnselectedPod(ctx context.Context, c client.Client, u int) error {
	_, err := createPod(ctx, c, fmt.Sprintf("other-%05d", u), map[string]string{"app": "procmem-unselected"},
		fmt.Sprintf("10.244.%d.%d", u/250, u%250+1))
	return err
}

func createPod(ctx context.Context, c client.Client, podName string, labels map[string]string, ip string) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: podName, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "procmem-endpoint",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("create Pod %s: %w", podName, err)
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "procmem-endpoint", Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}},
	}
	if err := c.Status().Update(ctx, pod); err != nil {
		return nil, fmt.Errorf("Pod %s's status: %w", podName, err)
	}
	return pod, nil
}

// deletePod deletes Service i's endpoint k's Pod (none without -pods).
func deletePod(ctx context.Context, c client.Client, i, k int) error {
	if !*podsFlag {
		return nil
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: endpointPodName(i, k)}}
	if err := c.Delete(ctx, pod, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete Pod %s: %w", pod.Name, err)
	}
	return nil
}

// endpointOf is the EndpointSlice entry of endpoint k, naming its Pod when
// there is one.
func endpointOf(k int, pod *corev1.Pod) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{Addresses: []string{endpointIP(k)},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}}
	if pod != nil {
		ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
		if pod.Spec.NodeName != "" {
			ep.NodeName = ptr.To(pod.Spec.NodeName)
		}
	}
	return ep
}

// createService creates Service i, the Pods of its endpoints ks (with
// -pods) and its EndpointSlice.
func createService(ctx context.Context, c client.Client, i int, ks []int) error {
	if err := c.Create(ctx, service(i)); err != nil {
		return fmt.Errorf("create Service %s: %w", name(i), err)
	}
	eps := make([]discoveryv1.Endpoint, 0, len(ks))
	for _, k := range ks {
		var pod *corev1.Pod
		if *podsFlag {
			var err error
			if pod, err = createEndpointPod(ctx, c, i, k); err != nil {
				return err
			}
		}
		eps = append(eps, endpointOf(k, pod))
	}
	if err := c.Create(ctx, slice(i, eps)); err != nil {
		return fmt.Errorf("create EndpointSlice %s: %w", name(i), err)
	}
	return nil
}

// firstEndpoints are the endpoints Service i is created with: k from
// i×-endpoints on.
func firstEndpoints(i int) []int {
	ks := make([]int, *endpoints)
	for j := range ks {
		ks[j] = i**endpoints + j
	}
	return ks
}

// createUnselectedPods creates n Pods no Service selects (none without
// -pods).
func createUnselectedPods(ctx context.Context, c client.Client, n int) error {
	if !*podsFlag {
		return nil
	}
	return testutil.Parallel(n, podWorkers, func(u int) error { return createUnselectedPod(ctx, c, u) })
}
