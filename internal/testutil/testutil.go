// Package testutil holds the helpers that the integration tests of several
// packages share: waiting for a condition, building LoadBalancer Services and
// EndpointSlices, and printing a load balancer's backends.
package testutil

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/model"
)

// Eventually polls cond every 50ms until it holds or timeout passes; the
// failure names what was awaited and the last thing cond said.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, last)
}

// Client returns a direct (uncached) client.
func Client(t testing.TB, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// LBService is a LoadBalancer Service of the given class selecting app=name,
// with one TCP port "http".
func LBService(ns, name, class string, port, target int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: ptr.To(class),
			Selector:          map[string]string{"app": name},
			Ports:             []corev1.ServicePort{{Name: "http", Port: port, TargetPort: intstr.FromInt32(target), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// Slice is the Service's EndpointSlice "<svc>-slice" with ready endpoints at
// addrs on port "http".
func Slice(ns, svc string, port int32, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc + "-slice",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

// Backends lists a load balancer's backends as "address:port=state".
func Backends(lb *model.LoadBalancer) []string {
	var out []string
	if lb == nil {
		return nil
	}
	for _, l := range lb.Listeners {
		for _, b := range l.Backends {
			out = append(out, fmt.Sprintf("%s=%s", b.ID(), b.State))
		}
	}
	return out
}

// StopManager cancels a manager started in a goroutine that reports its end
// on done, and fails the test if it errs or does not stop within 30 s.
func StopManager(t testing.TB, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("manager: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("manager did not stop")
	}
}

// FreePort is a TCP port free on 127.0.0.1 a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
