package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/model"
)

// The cluster's objects: the Services and their EndpointSlices.

// setAddress writes Service i's frontend address into its status.
func setAddress(ctx context.Context, c client.Client, i int) error {
	var svc corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name(i)}, &svc); err != nil {
		return err
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: address(i), IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)}}
	return c.Status().Update(ctx, &svc)
}

// address is Service i's frontend address, in --address-pool.
func address(i int) string {
	a := 128<<8 + i + 1
	return fmt.Sprintf("127.0.%d.%d", a>>8, a&255)
}

func service(i int) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name(i),
			// Checks of endpoints that refuse every 10 s, not 2 s: the
			// checks are not what is measured — but for the Services the
			// gate-wait steps change, whose new endpoint's checks are
			// what a gate waits for (gatewait.go): at the shipped 2 s.
			Annotations: checkInterval(i)},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: ptr.To("zerodrop.dev/haproxy"),
			// 5,000 Services do not fit the default node-port range.
			AllocateLoadBalancerNodePorts: ptr.To(false),
			Selector:                      map[string]string{"app": name(i)},
			Ports:                         []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// slice is Service i's EndpointSlice with the endpoints eps.
func slice(i int, eps []discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name(i), Labels: map[string]string{discoveryv1.LabelServiceName: name(i)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   eps,
	}
}

func name(i int) string { return fmt.Sprintf("svc-%05d", i) }

// checkInterval is Service i's health-check interval annotation: 10 s, or
// none (the shipped default) for a gate-wait Service.
func checkInterval(i int) map[string]string {
	if isGateService(i) {
		return nil
	}
	return map[string]string{model.AnnotationHealthCheckInterval: "10s"}
}
