package azure_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestTerminationGateOnAzure is invariant 6 on Azure, on the real apiserver
// and the emulator: a terminating pod's endpoint first drains (admin state
// Down: no new connections, established TCP ones go on), is removed after its
// drain timeout, and the drain endpoint answers once Down is applied and one
// probe interval (Azure's, 5s) has passed, not before.
func TestTerminationGateOnAzure(t *testing.T) {
	cfg := apiserver(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	ns := namespace(t, c, "drain")
	emu := azurearm.New(azurearm.Options{})
	svc := lbService(ns, "web", "lb-a", false)
	svc.Annotations["zerodrop.dev/drain-timeout"] = "1s"
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, endpointSlice(ns, "web", "10.1.0.5", "10.1.0.6")); err != nil {
		t.Fatal(err)
	}

	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	prov := newProvider(t, emu, m.ProviderHooks("azure"), "lb-a")
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	drainAddr := ln.Addr().String()
	ln.Close()
	in := buildController(t, mctx, cfg, prov, m, ns, service.SyncIncremental, drainAddr, func(c *controller.Config) {
		c.Override.DrainPollInterval, c.Override.CoalesceWindow = 100*time.Millisecond, 50*time.Millisecond
	})
	done := make(chan error, 1)
	go func() { done <- in.Start(mctx) }()
	defer func() { cancel(); <-done }()
	mgr := in.Manager
	gateURL := "http://" + drainAddr

	state := func() string { return strings.Join(emulatorState(emu, "lb-a")["lb-a/zd-"+ns+".web.tcp-80"], " ") }
	testutil.Eventually(t, 30*time.Second, "both endpoints in the pool", func() (bool, string) {
		s := state()
		return s == "10.1.0.5=None 10.1.0.6=None", s
	})

	// The pod: on a node, terminating with 30s of grace (a finalizer keeps
	// it while nobody runs it).
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-5", Labels: map[string]string{"app": "web"}, Finalizers: []string{"zerodrop.dev/test"}},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.PodIP, pod.Status.PodIPs = "10.1.0.5", []corev1.PodIP{{IP: "10.1.0.5"}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = c.Patch(ctx, pod, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
	}()
	if err := c.Delete(ctx, pod, client.GracePeriodSeconds(30)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the cache to see the pod terminating", func() (bool, string) {
		var p corev1.Pod
		err := mgr.GetCache().Get(ctx, client.ObjectKeyFromObject(pod), &p)
		return err == nil && p.DeletionTimestamp != nil && p.Status.PodIP != "", fmt.Sprint(err)
	})

	type answer struct {
		at     time.Time
		result string
		body   string
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := http.Get(gateURL + drain.Path + "?pod=" + ns + "/web-5")
		if err != nil {
			answered <- answer{at: time.Now(), body: err.Error()}
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answered <- answer{at: time.Now(), result: resp.Header.Get(drain.ResultHeader), body: string(body)}
	}()

	// The endpoint goes terminating, as the EndpointSlice controller
	// reports a deleted pod.
	var sl discoveryv1.EndpointSlice
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-slice"}, &sl); err != nil {
		t.Fatal(err)
	}
	sl.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
	if err := c.Update(ctx, &sl); err != nil {
		t.Fatal(err)
	}

	// upAt is when the last read that did not see Down yet began: the Down
	// write came later, so removedAt-upAt is at least as long as the
	// backend really drained, however slowly the reads run.
	var upAt, drainedAt, removedAt time.Time
	var early *answer // an answer that came while the loop still looked
	deadline := time.Now().Add(60 * time.Second)
	for removedAt.IsZero() {
		select {
		case a := <-answered:
			if drainedAt.IsZero() {
				t.Fatalf("the gate answered %q (%s) before the backend was seen Down", a.result, strings.TrimSpace(a.body))
			}
			early = &a
		default:
		}
		readAt := time.Now()
		s := state()
		switch {
		case s == "10.1.0.5=Down 10.1.0.6=None":
			if drainedAt.IsZero() {
				drainedAt = readAt
			}
		case s == "10.1.0.6=None":
			removedAt = time.Now()
		case drainedAt.IsZero():
			upAt = readAt
		}
		if time.Now().After(deadline) {
			t.Fatalf("not removed within 60s: %s", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if drainedAt.IsZero() {
		t.Fatalf("the backend was removed without draining first (admin state Down)")
	}
	// The endpoint is still in the slice (terminating, serving): only its
	// drain timeout may remove it, and not before that has passed.
	const drainTimeout = time.Second
	if drained := removedAt.Sub(upAt); drained < drainTimeout {
		t.Errorf("removed %s after it went Down, before its drain timeout %s", drained.Round(time.Millisecond), drainTimeout)
	}
	var a answer
	if early != nil {
		a = *early
	} else {
		a = <-answered
	}
	if a.result != "drained" {
		t.Fatalf("gate answered %q: %s", a.result, a.body)
	}
	// The gate answers once Down is applied and two probe intervals have
	// passed (the hosts have stopped sending new flows). Down was applied
	// after upAt, the last read that did not see it.
	const settle = 10 * time.Second
	if waited := a.at.Sub(upAt); waited < settle {
		t.Errorf("the gate answered %s after the last read without Down, want at least two probe intervals, %s", waited.Round(time.Millisecond), settle)
	}
	t.Logf("drained (Down) after the endpoint turned terminating; removed %s later; the gate answered %s after Down was seen",
		removedAt.Sub(drainedAt).Round(time.Millisecond), a.at.Sub(drainedAt).Round(time.Millisecond))
}
