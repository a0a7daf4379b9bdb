package install

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestDrainGuardOnAPIServer runs the chart's drain-address guard on a real
// kube-apiserver (its CEL compiled and evaluated there, not only rendered):
// for an IPv4 and an IPv6 drain address, a Service whose spec.externalIPs or
// status.loadBalancer.ingress names the address is refused, in every
// spelling the API server accepts for it (seen failing while the policy
// compared strings: fd00:10:96:0:0:0:0:5a and FD00:10:96::5A got through),
// and a Service naming another address is not. A guard that failed to compile would, with
// failurePolicy Fail, refuse every Service write instead: the other
// Services' writes show it does not.
func TestDrainGuardOnAPIServer(t *testing.T) {
	// Dual-stack, so that the API server accepts Services of both families.
	env := controlplane.StartEnvServiceRange(t, "10.0.0.0/16,fd00:10:96::/108")
	c := testutil.Client(t, env.Config)
	ctx := context.Background()
	v, err := discovery.NewDiscoveryClientForConfigOrDie(env.Config).ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		release, kube, drain string
		spellings            []string // the same address as a user may write it
		other                string
	}{
		// As helm renders it for this API server: the CEL IP library
		// compares addresses parsed, whatever their spelling.
		{"guard4", v.GitVersion, "10.96.0.90", []string{"10.96.0.90"}, "10.96.0.91"},
		{"guard6", v.GitVersion, "fd00:10:96::5a", []string{"fd00:10:96::5a", "fd00:10:96:0:0:0:0:5a", "FD00:10:96::5A"}, "fd00:10:96::5b"},
		// As for Kubernetes 1.30 (no IP library in stored expressions):
		// strings, so only drain.clusterIP's own spelling is caught.
		{"guard130", "1.30.0", "fd00:10:96::5c", []string{"fd00:10:96::5c"}, "fd00:10:96::5d"},
	} {
		out, err := runHelm(t, "template", tc.release, chartDir, "--namespace", namespace, "--values", deployValues,
			"--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy", "--kube-version", tc.kube,
			"--set", "fullnameOverride="+tc.release, "--set", "drain.clusterIP="+tc.drain)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := parseObjects(out)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, o := range objs {
			if k := o.GetKind(); k == "ValidatingAdmissionPolicy" || k == "ValidatingAdmissionPolicyBinding" {
				if err := c.Create(ctx, o); err != nil {
					t.Fatalf("%s %s: %v", k, o.GetName(), err)
				}
				n++
			}
		}
		if n != 2 {
			t.Fatalf("%s: rendered %d guard objects, want the policy and its binding", tc.release, n)
		}

		svc := func(name string, ips ...string) *corev1.Service {
			return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
				Spec: corev1.ServiceSpec{ExternalIPs: ips,
					Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
		}
		refused := func(err error) bool {
			return err != nil && strings.Contains(err.Error(), "drain address")
		}
		// A policy takes effect a moment after it is created: wait for the
		// first refusal, removing what got through meanwhile.
		first := svc(tc.release+"-probe", tc.spellings[0])
		testutil.Eventually(t, 60*time.Second, tc.release+": the guard refuses externalIPs ["+tc.drain+"]", func() (bool, string) {
			err := c.Create(ctx, first.DeepCopy())
			if err == nil {
				_ = c.Delete(ctx, first.DeepCopy())
				return false, "created"
			}
			return refused(err), err.Error()
		})
		for i, ip := range tc.spellings {
			err := c.Create(ctx, svc(fmt.Sprintf("%s-ext-%d", tc.release, i), "192.0.2.1", ip))
			if !refused(err) {
				t.Errorf("%s: a Service with externalIPs [192.0.2.1 %s]: %v; want the guard's refusal", tc.release, ip, err)
			}
		}
		ok := svc(tc.release+"-other", tc.other)
		if err := c.Create(ctx, ok); err != nil {
			t.Fatalf("%s: a Service with externalIPs [%s] (not the drain address): %v", tc.release, tc.other, err)
		}
		// The status, which a load balancer controller writes.
		lb := svc(tc.release + "-lb")
		lb.Spec.Type = corev1.ServiceTypeLoadBalancer
		if err := c.Create(ctx, lb); err != nil {
			t.Fatal(err)
		}
		for _, ip := range append([]string{tc.other}, tc.spellings...) {
			var cur corev1.Service
			if err := c.Get(ctx, client.ObjectKeyFromObject(lb), &cur); err != nil {
				t.Fatal(err)
			}
			cur.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
			err := c.Status().Update(ctx, &cur)
			switch {
			case ip == tc.other && err != nil:
				t.Errorf("%s: status ingress %s (not the drain address): %v", tc.release, ip, err)
			case ip != tc.other && !refused(err):
				t.Errorf("%s: status ingress %s: %v; want the guard's refusal", tc.release, ip, err)
			}
		}
	}
}
