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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/provider/azure"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// ruleLimit stands for Azure's 1,500 rules in TestServiceBeyondTheRuleLimitIsRefusedAlone,
// in the emulator and the provider alike.
const ruleLimit = 4

// TestServiceBeyondTheRuleLimitIsRefusedAlone: lb-a holds ruleLimit rules,
// the emulator refusing any PUT with more (Options.Limits). A fifth Service
// placed on it is refused alone: a Warning Event and ConfigValid=False,
// no write carrying it is sent (the emulator answers no 400), and the
// others' changes are written as ever. A restart writes nothing; once a
// Service leaves, the refused one takes its room.
func TestServiceBeyondTheRuleLimitIsRefusedAlone(t *testing.T) {
	cfg := apiserver(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	ns := namespace(t, c, "capacity")
	emu := azurearm.New(azurearm.Options{Limits: azurearm.LBLimits{Rules: ruleLimit}})
	limited := func(o *azure.Options) { o.MaxRules = ruleLimit }
	for i := range ruleLimit {
		name := fmt.Sprintf("web-%d", i)
		for _, o := range []client.Object{lbService(ns, name, "lb-a", false), endpointSlice(ns, name, fmt.Sprintf("10.3.%d.1", i))} {
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := startControllerWith(t, cfg, emu, ns, service.SyncIncremental, limited, lbNames...)
	waitConverged(t, c, emu, r, ns, 60*time.Second)
	before := emulatorState(emu, "lb-a")

	for _, o := range []client.Object{lbService(ns, "extra", "lb-a", false), endpointSlice(ns, "extra", "10.3.9.1")} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 60*time.Second, "the Service beyond the limit refused", func() (bool, string) {
		return refused(t, c, ns, "extra")
	})
	// Another Service's change is written beside the refused one.
	if err := update(ctx, c, &discoveryv1.EndpointSlice{}, ns, "web-0-slice", func(o client.Object) {
		o.(*discoveryv1.EndpointSlice).Endpoints[0].Addresses[0] = "10.3.0.2"
	}); err != nil {
		t.Fatal(err)
	}
	web0 := "lb-a/zd-" + ns + ".web-0.tcp-80"
	testutil.Eventually(t, 60*time.Second, "web-0's new endpoint written", func() (bool, string) {
		got := emulatorState(emu, "lb-a")[web0]
		return reflect.DeepEqual(got, []string{"10.3.0.2=None"}), fmt.Sprintf("%s holds %v", web0, got)
	})
	after := emulatorState(emu, "lb-a")
	before[web0] = after[web0]
	if !reflect.DeepEqual(after, before) {
		t.Errorf("lb-a holds %v, want the four Services' rules only, as before but for web-0's endpoint: %v", after, before)
	}
	calls, _ := emu.Calls(0)
	for _, call := range calls {
		if call.Status == 400 {
			t.Errorf("a write the emulator refused was sent: %s %s: %s", call.Method, call.Resource, call.Error)
		}
	}
	time.Sleep(500 * time.Millisecond)
	r.stop(t)

	counted := emu.Counters()
	second := startControllerWith(t, cfg, emu, ns, service.SyncIncremental, limited, lbNames...)
	testutil.Eventually(t, 20*time.Second, "lb-a reconciled after the restart", func() (bool, string) {
		n := metrics.Sum(second.metrics.Reconciles)
		return n >= 1, fmt.Sprintf("reconciles=%v", n)
	})
	time.Sleep(time.Second)
	if d := emu.Counters().Sub(counted); d.Puts()+d.Deletes != 0 {
		t.Errorf("restart with a Service refused: %+v, want no write (the same Services win)", d)
	}

	// Room again: the refused Service takes it.
	if err := c.Delete(ctx, lbService(ns, "web-3", "lb-a", false)); err != nil {
		t.Fatal(err)
	}
	extra := "lb-a/zd-" + ns + ".extra.tcp-80"
	testutil.Eventually(t, 60*time.Second, "extra served once web-3 left", func() (bool, string) {
		got := emulatorState(emu, "lb-a")[extra]
		return reflect.DeepEqual(got, []string{"10.3.9.1=None"}), fmt.Sprintf("%s holds %v", extra, got)
	})
	second.stop(t)
}

// refused reports whether svc has ConfigValid=False and a Warning Event for
// being over the load balancer's limit.
func refused(t *testing.T, c client.Client, ns, svc string) (bool, string) {
	var s corev1.Service
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: svc}, &s); err != nil {
		return false, err.Error()
	}
	cond := meta.FindStatusCondition(s.Status.Conditions, service.ConditionConfigValid)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != service.ReasonUnrepresentable || !strings.Contains(cond.Message, "rules") {
		return false, fmt.Sprintf("%s: ConfigValid %+v", svc, cond)
	}
	for _, e := range warnings(t, c, ns) {
		if e.Regarding.Name == svc && e.Reason == service.ReasonUnrepresentable && strings.Contains(e.Note, "past Azure's limits") {
			return true, ""
		}
	}
	return false, svc + ": no Warning Event naming the limit"
}
