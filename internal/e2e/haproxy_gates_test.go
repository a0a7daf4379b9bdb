package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/webhook"
)

// haproxyServer is one server as HAProxy itself reports it (show stat).
type haproxyServer struct {
	status string // UP, DOWN, DRAIN, MAINT, …
	scur   int
}

// readHAProxy asks HAProxy's admin socket directly, not the controller.
func readHAProxy(t *testing.T, dir string) map[string]haproxyServer {
	t.Helper()
	conn, err := net.DialTimeout("unix", filepath.Join(dir, "admin.sock"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "show stat\n"); err != nil {
		t.Fatal(err)
	}
	out := map[string]haproxyServer{}
	sc := bufio.NewScanner(conn)
	var col map[string]int
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# ") {
			col = map[string]int{}
			for i, name := range strings.Split(strings.TrimPrefix(line, "# "), ",") {
				col[name] = i
			}
			continue
		}
		f := strings.Split(line, ",")
		if col == nil || len(f) <= col["status"] || f[col["svname"]] == "FRONTEND" || f[col["svname"]] == "BACKEND" {
			continue
		}
		scur, _ := strconv.Atoi(f[col["scur"]])
		out[f[col["svname"]]] = haproxyServer{status: f[col["status"]], scur: scur}
	}
	return out
}

// kubeletPreStop runs the pod's preStop httpGet as a kubelet would and
// returns what the drain endpoint answered, and when.
func kubeletPreStop(t *testing.T, pod *corev1.Pod) (int, string, time.Time) {
	t.Helper()
	h := pod.Spec.Containers[0].Lifecycle.PreStop.HTTPGet
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(h.Host, h.Port.String()), Path: h.Path}
	if path, query, ok := strings.Cut(h.Path, "?"); ok {
		u.Path, u.RawQuery = path, query
	}
	resp, err := http.Get(u.String())
	if err != nil {
		t.Error(err)
		return 0, "", time.Now()
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get(drain.ResultHeader), time.Now()
}

// TestHAProxyGates is issue 4's acceptance on the real apiserver and a real
// HAProxy: the readiness gate turns True only once HAProxy reports the pod's
// server UP; deleting a pod with the injected preStop hook, the drain call
// answers once HAProxy shows the server in drain (not before), while a
// long-lived connection opened before is still served by the pod; the drain
// timeout then closes that connection cleanly, and no new connection reaches
// the terminating pod.
func TestHAProxyGates(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	dir := t.TempDir()
	const ns, app = "default", "shop"
	port, lbPort := freePort(t), freePort(t)

	svc := lbService(ns, app, haproxyClass, int32(lbPort), int32(port))
	svc.Annotations = map[string]string{
		model.AnnotationHealthCheckInterval: "300ms",
		model.AnnotationDrainTimeout:        "3s",
	}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	m := newMetrics(t)
	prov := haproxyFor(t, dir, m)
	flaky := &flakyBackends{Provider: prov}
	ctrl := startController(t, cfg, prov, m, controllerOptions{sync: service.SyncIncremental, drainProvider: flaky})
	defer ctrl.stop(t)
	drainHost, drainPort, _ := net.SplitHostPort(strings.TrimPrefix(strings.TrimSuffix(ctrl.drainURL, drain.Path), "http://"))
	dport, _ := strconv.Atoi(drainPort)

	// Pod A is served first; its process is not listening yet, so HAProxy's
	// checks fail and the gate must stay closed.
	podA := gatedPod(t, c, ns, "shop-a", app, "198.18.5.1")
	setSlice(t, c, ns, app, int32(port), endpoint{ip: "198.18.5.1", pod: "shop-a"})
	serverA := fmt.Sprintf("127.18.5.1:%d", port)
	eventually(t, 20*time.Second, "pod A's server in HAProxy", func() (bool, string) {
		_, ok := readHAProxy(t, dir)[serverA]
		return ok, fmt.Sprint(readHAProxy(t, dir))
	})
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if gateTrue(t, c, ns, "shop-a") {
			t.Fatalf("gate opened while HAProxy reports %+v", readHAProxy(t, dir)[serverA])
		}
	}
	startBackend(t, "shop-a", serverA)
	eventually(t, 20*time.Second, "pod A's gate", func() (bool, string) {
		open := gateTrue(t, c, ns, "shop-a")
		st := readHAProxy(t, dir)[serverA]
		if open && st.status != "UP" {
			t.Fatalf("gate opened while HAProxy reports %q", st.status)
		}
		return open, st.status
	})
	_ = podA

	// Pod B, with the preStop hook the webhook injects.
	podB := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop-b", Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "app",
			Ports: []corev1.ContainerPort{{ContainerPort: int32(port)}}}}},
	}
	res := webhook.Mutate(podB, ns, []*corev1.Service{svc}, webhook.Drain{Host: drainHost, Port: int32(dport)}, webhook.GenerateName)
	if !res.GateAdded || len(res.Hooked) != 1 {
		t.Fatalf("webhook mutation: %+v", res)
	}
	serverB := fmt.Sprintf("127.18.5.2:%d", port)
	backendB := startBackend(t, "shop-b", serverB)
	if err := c.Create(ctx, podB); err != nil {
		t.Fatal(err)
	}
	podB.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.18.5.2", PodIPs: []corev1.PodIP{{IP: "198.18.5.2"}},
		Conditions: []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}}
	if err := c.Status().Update(ctx, podB); err != nil {
		t.Fatal(err)
	}
	setSlice(t, c, ns, app, int32(port), readyEndpoint("198.18.5.1"), endpoint{ip: "198.18.5.2", pod: "shop-b"})
	eventually(t, 20*time.Second, "pod B's gate", func() (bool, string) {
		return gateTrue(t, c, ns, "shop-b"), fmt.Sprint(readHAProxy(t, dir)[serverB])
	})
	setSlice(t, c, ns, app, int32(port), readyEndpoint("198.18.5.1"), readyEndpoint("198.18.5.2"))

	lbAddr := net.JoinHostPort(awaitIngress(t, c, ns, app), strconv.Itoa(lbPort))
	// A long-lived connection on pod B.
	var long *longConn
	for i := 0; i < 20 && long == nil; i++ {
		lc, err := dialLong(lbAddr)
		if err != nil {
			t.Fatal(err)
		}
		if name, err := lc.roundTrip(); err == nil && name == "shop-b" {
			long = lc
		} else {
			lc.conn.Close()
		}
	}
	if long == nil {
		t.Fatal("no connection landed on pod B")
	}
	defer long.conn.Close()

	// Delete pod B: it terminates; the kubelet runs its preStop hook; the
	// EndpointSlice shows it terminating but serving.
	if err := c.Get(ctx, client.ObjectKeyFromObject(podB), podB); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, podB); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(podB), podB); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		code   int
		result string
		at     time.Time
	}
	answered := make(chan answer, 1)
	// The drain endpoint's reads fail a few times, as HAProxy's socket does
	// while it reloads: the gate must look again, not give up.
	flaky.failNext(5)
	go func() {
		code, result, at := kubeletPreStop(t, podB)
		answered <- answer{code, result, at}
	}()
	// The last instant HAProxy was seen sending B new connections (UP, not
	// DRAIN): the answer must come after it.
	stopWatch := watchPresent(t, func() bool {
		st, ok := readHAProxy(t, dir)[serverB]
		return ok && st.status != "DRAIN" && st.status != "MAINT"
	})
	setSlice(t, c, ns, app, int32(port), readyEndpoint("198.18.5.1"),
		endpoint{ip: "198.18.5.2", pod: "shop-b", serving: true, terminating: true})

	var a answer
	select {
	case a = <-answered:
	case <-time.After(20 * time.Second):
		t.Fatal("drain did not answer")
	}
	if a.code != http.StatusOK || a.result != "drained" {
		t.Fatalf("drain answered %d %q, want 200 drained", a.code, a.result)
	}
	if seen := stopWatch(); seen.After(a.at) {
		t.Fatalf("drain answered at %s, but HAProxy still sent pod B new connections at %s", a.at.Format(time.StampMicro), seen.Format(time.StampMicro))
	}
	// Answered at drain, not at removal: B is still there with the long
	// connection, which B keeps serving until it stops; new connections
	// never reach it.
	if st, present := readHAProxy(t, dir)[serverB]; !present || st.status != "DRAIN" {
		t.Logf("HAProxy shows pod B's server %+v (present %v) at the answer", st, present)
	}
	for i := 0; i < 5; i++ {
		if name, err := long.roundTrip(); err != nil || name != "shop-b" {
			t.Fatalf("long-lived connection after the drain answer: %q %v", name, err)
		}
		if name, err := get("http://" + lbAddr + "/"); err != nil || name != "shop-a" {
			t.Fatalf("new connection after the drain answer went to %q (%v), want shop-a", name, err)
		}
	}
	if n := flaky.failed.Load(); n != 5 {
		t.Fatalf("the gate met %d of the 5 read errors: it answered before looking through them", n)
	}
	// The drain timeout closed the long connection at the load balancer: a
	// clean close (FIN), not a reset.
	if err := long.closedCleanly(); err != nil {
		t.Fatalf("long-lived connection did not close cleanly: %v", err)
	}
	// Now the kubelet sends SIGTERM: the pod stops gracefully.
	if err := backendB.shutdown(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if name, err := get("http://" + lbAddr + "/"); err != nil || name != "shop-a" {
			t.Fatalf("after pod B stopped: %q %v", name, err)
		}
	}
}

// flakyBackends fails the next n Backends calls, as HAProxy's master socket
// does during a reload or Azure when it throttles.
type flakyBackends struct {
	provider.Provider
	left   atomic.Int64
	failed atomic.Int64
}

func (f *flakyBackends) failNext(n int64) { f.left.Store(n) }

func (f *flakyBackends) Backends(ctx context.Context, key string) ([]provider.BackendStatus, error) {
	if f.left.Add(-1) >= 0 {
		f.failed.Add(1)
		return nil, errors.New("injected: socket busy")
	}
	return f.Provider.Backends(ctx, key)
}

// watchPresent looks at present() until stop and returns when the last look
// that found the backend present began: an answer returned before that
// instant came while the backend was still there.
func watchPresent(t *testing.T, present func() bool) (stop func() time.Time) {
	var last time.Time
	done, finished := make(chan struct{}), make(chan struct{})
	var once sync.Once
	stop = func() time.Time {
		once.Do(func() { close(done) })
		<-finished
		return last
	}
	t.Cleanup(func() { stop() }) // a test that fails first must not leave it looking
	go func() {
		defer close(finished)
		for {
			at := time.Now()
			if present() {
				last = at
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return stop
}

// TestHAProxyGateBound is invariant 6's bound: a pod whose drain the gate
// cannot see (it cannot read the load balancer) is let stop at its deletion
// time minus the shutdown budget, with the timeout answer — not before that
// deadline, and not cut short.
func TestHAProxyGateBound(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	dir := t.TempDir()
	const ns, app = "default", "slow"
	port, lbPort := freePort(t), freePort(t)
	svc := lbService(ns, app, haproxyClass, int32(lbPort), int32(port))
	// The drain timeout outlasts the grace period: only the bound ends the wait.
	svc.Annotations = map[string]string{model.AnnotationHealthCheckInterval: "300ms", model.AnnotationDrainTimeout: "5m"}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	m := newMetrics(t)
	prov := haproxyFor(t, dir, m)
	flaky := &flakyBackends{Provider: prov}
	ctrl := startController(t, cfg, prov, m, controllerOptions{sync: service.SyncIncremental, drainProvider: flaky})
	defer ctrl.stop(t)
	drainHost, drainPort, _ := net.SplitHostPort(strings.TrimPrefix(strings.TrimSuffix(ctrl.drainURL, drain.Path), "http://"))
	dport, _ := strconv.Atoi(drainPort)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "slow-a", Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "app",
			Ports: []corev1.ContainerPort{{ContainerPort: int32(port)}}}}},
	}
	if res := webhook.Mutate(pod, ns, []*corev1.Service{svc}, webhook.Drain{Host: drainHost, Port: int32(dport)}, webhook.GenerateName); len(res.Hooked) != 1 {
		t.Fatalf("webhook mutation: %+v", res)
	}
	server := fmt.Sprintf("127.18.6.1:%d", port)
	startBackend(t, "slow-a", server)
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.18.6.1", PodIPs: []corev1.PodIP{{IP: "198.18.6.1"}},
		Conditions: []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	setSlice(t, c, ns, app, int32(port), endpoint{ip: "198.18.6.1", pod: "slow-a"})
	eventually(t, 20*time.Second, "the pod's gate", func() (bool, string) {
		return gateTrue(t, c, ns, "slow-a"), fmt.Sprint(readHAProxy(t, dir)[server])
	})
	setSlice(t, c, ns, app, int32(port), readyEndpoint("198.18.6.1"))
	lbAddr := net.JoinHostPort(awaitIngress(t, c, ns, app), strconv.Itoa(lbPort))
	var long *longConn
	eventually(t, 20*time.Second, "a connection through the load balancer", func() (bool, string) {
		lc, err := dialLong(lbAddr)
		if err != nil {
			return false, err.Error()
		}
		if _, err := lc.roundTrip(); err != nil {
			lc.conn.Close()
			return false, err.Error()
		}
		long = lc
		return true, ""
	})
	defer long.conn.Close()

	// Grace 6s: the budget is a third of it, 2s; the bound is the deletion
	// time minus 2s.
	if err := c.Delete(ctx, pod, client.GracePeriodSeconds(6)); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	if pod.DeletionTimestamp == nil {
		t.Fatal("the pod is not terminating")
	}
	bound := pod.DeletionTimestamp.Add(-2 * time.Second)
	answered := make(chan time.Time, 1)
	var code int
	var result string
	// The gate cannot read HAProxy for the whole grace period (its socket
	// refuses, as in a long reload storm): it never sees the drain, so only
	// the bound ends the wait.
	flaky.failNext(1 << 40)
	go func() {
		var at time.Time
		code, result, at = kubeletPreStop(t, pod)
		answered <- at
	}()
	setSlice(t, c, ns, app, int32(port), endpoint{ip: "198.18.6.1", pod: "slow-a", serving: true, terminating: true})
	eventually(t, 20*time.Second, "HAProxy draining the pod", func() (bool, string) {
		st := readHAProxy(t, dir)[server]
		return st.status == "DRAIN", st.status
	})
	var at time.Time
	select {
	case at = <-answered:
	case <-time.After(60 * time.Second):
		t.Fatal("drain did not answer")
	}
	if code != http.StatusOK || result != "timeout" {
		t.Fatalf("drain answered %d %q although it could never read the load balancer, want 200 timeout", code, result)
	}
	if at.Before(bound) {
		t.Fatalf("drain answered timeout at %s, before the bound %s", at.Format(time.StampMilli), bound.Format(time.StampMilli))
	}
	// The timeout is true: the gate saw nothing; HAProxy itself drains the
	// pod's connection (the controller's own reads work).
	if st := readHAProxy(t, dir)[server]; st.status != "DRAIN" || st.scur < 1 {
		t.Fatalf("drain answered timeout, but HAProxy reports %+v", st)
	}
	if _, err := long.roundTrip(); err != nil {
		t.Fatalf("the draining connection after the timeout answer: %v", err)
	}
}
