package azure_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestOneBadServiceDoesNotFreezeTheLoadBalancer: two Services share lb-a.
// One turns unrepresentable (a named targetPort that resolves to 8080 on the
// old pods and 9090 on the new ones, as during a rollout: an Azure rule has
// one backend port); the other changes its endpoints and gets an FQDN and an
// IPv6 EndpointSlice beside its IPv4 one. The good Service's change is
// written, with its IPv4 endpoints only; the bad one gets a Warning Event
// and ConfigValid=False, and its rule and pool stay as they were observed.
func TestOneBadServiceDoesNotFreezeTheLoadBalancer(t *testing.T) {
	cfg := apiserver(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	ns := namespace(t, c, "isolate")
	emu := azurearm.New(azurearm.Options{})
	bad := lbService(ns, "bad", "lb-a", false)
	bad.Spec.Ports[0].TargetPort = intstr.FromString("http")
	for _, o := range []client.Object{
		lbService(ns, "good", "lb-a", false), endpointSlice(ns, "good", "10.7.0.1"),
		bad, endpointSlice(ns, "bad", "10.7.1.1", "10.7.1.2"),
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	r := startController(t, cfg, emu, ns, service.SyncIncremental, lbNames...)
	waitConverged(t, c, emu, r, ns, 60*time.Second)

	goodRule, badRule := "lb-a/zd-"+ns+".good.tcp-80", "lb-a/zd-"+ns+".bad.tcp-80"
	badBefore := emulatorState(emu, "lb-a")[badRule]
	badPortBefore := backendPort(t, emu, "zd-"+ns+".bad.tcp-80")

	// The rollout's new pods publish the named port on 9090.
	v2 := endpointSlice(ns, "bad", "10.7.1.3")
	v2.Name = "bad-v2"
	v2.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](9090), Protocol: ptr.To(corev1.ProtocolTCP)}}
	fqdn := endpointSlice(ns, "good", "backend.example.com")
	fqdn.Name, fqdn.AddressType = "good-fqdn", discoveryv1.AddressTypeFQDN
	ipv6 := endpointSlice(ns, "good", "fd00::7")
	ipv6.Name, ipv6.AddressType = "good-ipv6", discoveryv1.AddressTypeIPv6
	for _, o := range []client.Object{v2, fqdn, ipv6} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := update(ctx, c, &discoveryv1.EndpointSlice{}, ns, "good-slice", func(o client.Object) {
		o.(*discoveryv1.EndpointSlice).Endpoints[0].Addresses[0] = "10.7.0.2"
	}); err != nil {
		t.Fatal(err)
	}

	testutil.Eventually(t, 60*time.Second, "the good Service's change written, the bad one reported", func() (bool, string) {
		if got := emulatorState(emu, "lb-a")[goodRule]; !reflect.DeepEqual(got, []string{"10.7.0.2=None"}) {
			return false, fmt.Sprintf("%s holds %v, want [10.7.0.2=None]", goodRule, got)
		}
		var s corev1.Service
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bad"}, &s); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(s.Status.Conditions, service.ConditionConfigValid)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != service.ReasonUnrepresentable || !strings.Contains(cond.Message, "one backend port") {
			return false, fmt.Sprintf("bad: ConfigValid %+v", cond)
		}
		for _, e := range warnings(t, c, ns) {
			if e.Regarding.Name == "bad" && e.Reason == service.ReasonUnrepresentable && strings.Contains(e.Note, "one backend port") {
				return true, ""
			}
		}
		return false, "bad: no Warning Event naming the backend ports"
	})
	if got := emulatorState(emu, "lb-a")[badRule]; !reflect.DeepEqual(got, badBefore) {
		t.Errorf("the bad Service's pool changed: %v, was %v", got, badBefore)
	}
	if got := backendPort(t, emu, "zd-"+ns+".bad.tcp-80"); got != badPortBefore {
		t.Errorf("the bad Service's rule changed its backend port: %d, was %d", got, badPortBefore)
	}
	var good corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "good"}, &good); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(good.Status.Conditions, service.ConditionConfigValid) {
		t.Errorf("good: ConfigValid %+v", meta.FindStatusCondition(good.Status.Conditions, service.ConditionConfigValid))
	}
	for _, e := range warnings(t, c, ns) {
		if e.Regarding.Name == "good" {
			t.Errorf("Warning Event on the good Service: %s: %s", e.Reason, e.Note)
		}
	}
	r.stop(t)
}

// backendPort is the backend port of a rule on lb-a, as the emulator holds it.
func backendPort(t *testing.T, emu *azurearm.Emulator, rule string) int32 {
	t.Helper()
	lb, ok := emu.LoadBalancer(group, "lb-a")
	if !ok {
		t.Fatal("lb-a does not exist")
	}
	for _, r := range lb.Properties.LoadBalancingRules {
		if *r.Name == rule {
			return ptr.Deref(r.Properties.BackendPort, 0)
		}
	}
	t.Fatalf("no rule %s on lb-a", rule)
	return 0
}
