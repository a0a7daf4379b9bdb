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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controller/podgate"
	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider/azure"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestNodeLocalMoveWritesNothing: the whole controller (controller.Build)
// on the real apiserver and the ARM emulator, node mode, a Local Service
// whose one pod moves from node a to node b, as a rollout-local does. The
// Azure provider leaves the nodes to the probe (provider.ProbeDecider), as
// cloud-provider-azure does: both nodes are in the pool, neither admin
// Down, from the start. The new pod's readiness gate opens on its node
// already in the pool; the old pod's termination gate answers drained on
// its node's probe Down, read as news after its deletion began; and
// zerodrop makes no ARM write from the move's start to its end. The plan
// HAProxy's options would make of the same end state (no property) drains
// node a.
func TestNodeLocalMoveWritesNothing(t *testing.T) {
	rc := apiserver(t)
	c := newClient(t, rc)
	ns := namespace(t, c, "node-local")
	ctx := context.Background()
	emu := azurearm.New(azurearm.Options{})
	ips := map[string]string{"a": "10.240.7.1", "b": "10.240.7.2"}
	nodeName := func(n string) string { return ns + "-" + n }
	for _, n := range []string{"a", "b"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(n)}}
		if err := c.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), node) })
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ips[n]}}
		if err := c.Status().Update(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	// The nodes' probes on healthCheckNodePort: kube-proxy answers 200
	// where a ready local endpoint is.
	pr := &probes{up: map[string]bool{ips["a"]: true, ips["b"]: false}}
	emu.SetRuleHealth(pr.health)
	asked := func() int { pr.mu.Lock(); defer pr.mu.Unlock(); return pr.asked }
	setUp := func(n string, up bool) { pr.mu.Lock(); defer pr.mu.Unlock(); pr.up[ips[n]] = up }

	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	prov := newProviderWith(t, emu, m.ProviderHooks("azure"), func(o *azure.Options) {
		o.RuleHealth, o.HealthMaxAge, o.HealthQPS = true, 200*time.Millisecond, 50
	}, "lb-a")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	drainAddr := ln.Addr().String()
	ln.Close()
	runCtx, cancel := context.WithCancel(ctx)
	in := buildController(t, runCtx, rc, prov, m, ns, service.SyncIncremental, drainAddr, func(cfg *controller.Config) {
		cfg.Override.GatePollInterval, cfg.Override.DrainPollInterval = 50*time.Millisecond, 100*time.Millisecond
	})
	done := make(chan error, 1)
	go func() { done <- in.Start(runCtx) }()
	t.Cleanup(func() { testutil.StopManager(t, cancel, done) })

	svc := lbService(ns, "web", "lb-a", false)
	svc.Annotations[model.AnnotationBackendMode] = string(model.NodeMode)
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	nodePort := svc.Spec.Ports[0].NodePort
	if nodePort == 0 || svc.Spec.HealthCheckNodePort == 0 {
		t.Fatalf("the apiserver allocated nodePort %d, healthCheckNodePort %d", nodePort, svc.Spec.HealthCheckNodePort)
	}
	pod := func(name, n, ip string, gate bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "web"}, Finalizers: []string{"zerodrop.dev/test"}},
			Spec: corev1.PodSpec{NodeName: nodeName(n), Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		if gate {
			p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: podgate.ConditionType}}
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.Patch(context.Background(), p, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		})
		p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	endpoint := func(p *corev1.Pod, n string, ready, terminating bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{p.Status.PodIP}, NodeName: ptr.To(nodeName(n)),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.Name, UID: p.UID},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready || terminating),
				Terminating: ptr.To(terminating)}}
	}
	oldPod := pod("web-old", "a", "10.244.1.5", false)
	slice := endpointSlice(ns, "web")
	slice.Endpoints = []discoveryv1.Endpoint{endpoint(oldPod, "a", true, false)}
	if err := c.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}
	setEndpoints := func(eps ...discoveryv1.Endpoint) {
		t.Helper()
		if err := update(ctx, c, &discoveryv1.EndpointSlice{}, ns, slice.Name, func(o client.Object) {
			o.(*discoveryv1.EndpointSlice).Endpoints = eps
		}); err != nil {
			t.Fatal(err)
		}
	}

	rule := "lb-a/zd-" + ns + ".web.tcp-80"
	mine := func() string {
		var out []string
		for _, s := range emulatorState(emu, "lb-a")[rule] {
			if ip, _, _ := strings.Cut(s, "="); ip == ips["a"] || ip == ips["b"] {
				out = append(out, s)
			}
		}
		return strings.Join(out, " ")
	}
	both := ips["a"] + "=None " + ips["b"] + "=None"
	testutil.Eventually(t, 30*time.Second, "both nodes in the pool, neither admin Down", func() (bool, string) {
		s := mine()
		return s == both, s
	})
	// The Service's address is written once the create's Apply returned:
	// its call is on the record by then (the emulator stores a document a
	// moment before it records the call).
	testutil.Eventually(t, 30*time.Second, "the Service's address", func() (bool, string) {
		var s corev1.Service
		if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
			return false, err.Error()
		}
		return len(s.Status.LoadBalancer.Ingress) > 0, "no ingress yet"
	})
	_, from := emu.Calls(0)

	// The new pod on node b: its readiness gate opens on the node as the
	// pool has it, with no write.
	newPod := pod("web-new", "b", "10.244.2.5", true)
	setEndpoints(endpoint(oldPod, "a", true, false), endpoint(newPod, "b", false, false))
	testutil.Eventually(t, 30*time.Second, "the new pod's readiness gate", func() (bool, string) {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(newPod), &p); err != nil {
			return false, err.Error()
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == podgate.ConditionType {
				return cond.Status == corev1.ConditionTrue, string(cond.Status)
			}
		}
		return false, "no condition"
	})
	setUp("b", true) // kube-proxy on b answers now
	setEndpoints(endpoint(oldPod, "a", true, false), endpoint(newPod, "b", true, false))

	// The old pod goes: its termination gate is called (its preStop) and
	// its endpoint turns terminating.
	if err := c.Delete(ctx, oldPod, client.GracePeriodSeconds(30)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the cache to see the old pod terminating", func() (bool, string) {
		var p corev1.Pod
		err := in.Manager.GetCache().Get(ctx, client.ObjectKeyFromObject(oldPod), &p)
		return err == nil && p.DeletionTimestamp != nil, fmt.Sprint(err)
	})
	type answer struct{ result, body string }
	answered := make(chan answer, 1)
	go func() {
		resp, err := http.Get("http://" + drainAddr + drain.Path + "?pod=" + ns + "/" + oldPod.Name)
		if err != nil {
			answered <- answer{body: err.Error()}
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answered <- answer{result: resp.Header.Get(drain.ResultHeader), body: string(body)}
	}()
	setEndpoints(endpoint(oldPod, "a", false, true), endpoint(newPod, "b", true, false))
	// Node a's probe: Up in reads begun after the deletion, then Down
	// (kube-proxy counts no ready local endpoint there).
	start := asked()
	testutil.Eventually(t, 30*time.Second, "two rule-health reads after the deletion", func() (bool, string) {
		return asked() >= start+2, fmt.Sprintf("%d reads", asked()-start)
	})
	setUp("a", false)
	select {
	case a := <-answered:
		if a.result != "drained" {
			t.Fatalf("the old pod's termination gate answered %q: %s", a.result, strings.TrimSpace(a.body))
		}
	case <-time.After(40 * time.Second):
		t.Fatal("the old pod's termination gate did not answer")
	}

	// The old pod's endpoint goes; a reconcile after that changes nothing.
	setEndpoints(endpoint(newPod, "b", true, false))
	reconciles := metrics.Sum(m.Reconciles)
	testutil.Eventually(t, 30*time.Second, "a reconcile after the old endpoint went", func() (bool, string) {
		n := metrics.Sum(m.Reconciles)
		return n > reconciles, fmt.Sprintf("reconciles %v, before %v", n, reconciles)
	})
	time.Sleep(2 * time.Second) // a drain, were there one, would be written by now
	calls, _ := emu.Calls(from)
	for _, call := range calls {
		if call.Write() {
			t.Errorf("ARM write during the move: %s %v", call, call.Changes)
		}
	}
	if s := mine(); s != both {
		t.Errorf("after the move the pool has %s, want %s", s, both)
	}

	// What HAProxy's options (no provider.ProbeDecider) plan from the same
	// load balancer and objects: node a drained.
	obs, err := prov.Observe(ctx, "lb-a")
	if err != nil || obs == nil {
		t.Fatalf("observe: %v, %v", obs, err)
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	var cur corev1.Service
	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &cur); err != nil {
		t.Fatal(err)
	}
	var sl discoveryv1.EndpointSlice
	if err := c.Get(ctx, client.ObjectKeyFromObject(slice), &sl); err != nil {
		t.Fatal(err)
	}
	cfg, _ := model.ParseServiceConfig(cur.Annotations, prov.DefaultBackendMode())
	inputs := []model.ServiceInput{{Service: &cur, Config: cfg, Slices: []*discoveryv1.EndpointSlice{&sl}}}
	for _, decides := range []bool{true, false} {
		opts := model.DesiredOptions{ProbeDecidesLocal: decides}
		for i := range nodes.Items {
			opts.Nodes = append(opts.Nodes, &nodes.Items[i])
		}
		desired, _ := model.Desired("lb-a", inputs, opts)
		next, _ := model.Step(obs, desired, model.StepOptions{Keep: func(string) bool { return true }})
		var writes []string
		for _, op := range model.Diff(obs, next).Ops {
			// Only this test's nodes: the apiserver is shared, and earlier
			// tests' nodes are in the pool too.
			if op.Backend != nil && op.Listener == ns+"/web/tcp-80" && (op.Backend.Address == ips["a"] || op.Backend.Address == ips["b"]) {
				writes = append(writes, op.String())
			}
		}
		want := ""
		if !decides {
			want = fmt.Sprintf("update-backend %s/web/tcp-80 %s:%d", ns, ips["a"], nodePort)
		}
		if got := strings.Join(writes, "; "); got != want {
			t.Errorf("probe decides %v: the plan's backend writes %q, want %q", decides, got, want)
		}
	}
}
