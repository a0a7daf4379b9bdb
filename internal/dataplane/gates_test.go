package dataplane

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/testutil"
)

const testClass = "zerodrop.dev/haproxy"

type classServices struct{}

func (classServices) Managed(s *corev1.Service) bool {
	return s.Spec.LoadBalancerClass != nil && *s.Spec.LoadBalancerClass == testClass
}
func (classServices) Key(s *corev1.Service) string { return s.Namespace + "/" + s.Name }

// replica is one data-plane replica in a test: a real HAProxy that only the
// test writes (standing in for the replica's own zerodrop process) and its
// state endpoint.
type replica struct {
	name  string
	prov  *haproxy.Provider
	state *httptest.Server
}

func startReplica(t *testing.T, name string) *replica {
	t.Helper()
	dir := t.TempDir()
	p, err := haproxy.New(context.Background(), haproxy.Options{Dir: dir, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.StopHAProxy(t, dir) })
	r := &replica{name: name, prov: p, state: httptest.NewServer(StateHandler(p))}
	t.Cleanup(r.state.Close)
	return r
}

func (r *replica) remote() lbtarget.Replica {
	return lbtarget.Replica{Name: r.name, Provider: &Remote{Replica: r.name, BaseURL: r.state.URL, Client: r.state.Client()}}
}

// write makes the replica's load balancer lb, as its own writer would.
func (r *replica) write(t *testing.T, lb *model.LoadBalancer) {
	t.Helper()
	ctx := context.Background()
	observed, err := r.prov.Observe(ctx, lb.Key)
	if err != nil {
		t.Fatal(err)
	}
	if plan := model.Diff(observed, model.Canonical(lb)); !plan.Empty() {
		if err := r.prov.Apply(ctx, plan); err != nil {
			t.Fatalf("replica %s: %v", r.name, err)
		}
	}
}

func freePort(t *testing.T) int32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return int32(l.Addr().(*net.TCPAddr).Port)
}

// TestGatesWaitForEveryReplica: two data-plane replicas, each an HAProxy
// with the pod's backend. The drain call of the terminating pod answers only
// once both have the backend in drain: replica b is slow to apply it, and
// the call waits for it. Then b's zerodrop process dies while its HAProxy
// goes on serving (its state endpoint stops answering): a drain call waits
// for it — it answers "timeout" at its deadline, never "drained" — although
// replica a has drained.
func TestGatesWaitForEveryReplica(t *testing.T) {
	cfg := controlplane.Start(t)
	c := testutil.Client(t, cfg)
	ctx := context.Background()
	const ns = "default"
	svc := testutil.LBService(ns, "web", testClass, 80, 8080)
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	a, b := startReplica(t, "dp-a"), startReplica(t, "dp-b")
	listener := model.ListenerName(ns, "web", corev1.ProtocolTCP, 80)
	// lb is the load balancer with pod i's backend (127.0.132.i+1) in
	// states[i].
	port := freePort(t)
	lb := func(states ...model.BackendState) *model.LoadBalancer {
		l := model.Listener{Name: listener, Address: "127.0.131.1", Port: port, Protocol: model.TCP}
		for i, st := range states {
			l.Backends = append(l.Backends, model.Backend{Address: fmt.Sprintf("127.0.132.%d", i+1), Port: 8080,
				Weight: model.DefaultWeight, State: st})
		}
		return &model.LoadBalancer{Key: ns + "/web", Listeners: []model.Listener{l}}
	}
	a.write(t, lb(model.Active))
	b.write(t, lb(model.Active))

	finder := &lbtarget.Finder{Reader: c, Services: classServices{},
		Replicas: func(context.Context) ([]lbtarget.Replica, error) {
			return []lbtarget.Replica{a.remote(), b.remote()}, nil
		}}
	h := drain.NewHandler(drain.Options{Reader: c, Finder: finder, PollInterval: 50 * time.Millisecond,
		CacheLag: 100 * time.Millisecond, Logger: testr.New(t)})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	pod := terminatingPod(t, c, ns, "web-1", "127.0.132.1", 60)
	targets, err := finder.Targets(ctx, pod)
	if err != nil || len(targets) != 2 || targets[0].Replica != "dp-a" || targets[1].Replica != "dp-b" {
		t.Fatalf("targets %v, %v: want one per replica", lbtarget.Describe(targets), err)
	}

	// Replica a drains at once; b is slow.
	answer := make(chan string, 1)
	go func() { answer <- call(srv.URL, pod, 30*time.Second) }()
	a.write(t, lb(model.Draining))
	select {
	case got := <-answer:
		t.Fatalf("the drain call answered %q while replica b still had the backend active", got)
	case <-time.After(2 * time.Second):
	}
	b.write(t, lb(model.Draining))
	select {
	case got := <-answer:
		if got != "drained" {
			t.Fatalf("drain call answered %q once both replicas drained, want drained", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the drain call did not answer once both replicas had the backend in drain")
	}

	// Replica b's zerodrop process dies; its HAProxy (still holding the
	// backend, in drain or not) keeps serving. The gate cannot know what b
	// sends, so it waits: a second pod's call, backend drained on a, gets
	// "timeout" at its deadline, not "drained".
	pod2 := terminatingPod(t, c, ns, "web-2", "127.0.132.2", 3)
	a.write(t, lb(model.Draining, model.Active))
	b.write(t, lb(model.Draining, model.Active))
	b.state.Close()
	a.write(t, lb(model.Draining, model.Draining))
	if got := call(srv.URL, pod2, 30*time.Second); got != "timeout" {
		t.Fatalf("drain call with replica b's state endpoint down answered %q, want timeout at its deadline", got)
	}
	if _, err := finder.Targets(ctx, pod2); err == nil || !strings.Contains(err.Error(), "dp-b") {
		t.Errorf("Targets with replica b down: err %v, want one naming dp-b", err)
	}
}

// terminatingPod creates a running pod at ip and deletes it with a grace
// period of grace seconds; a finalizer keeps it terminating.
func terminatingPod(t *testing.T, c client.Client, ns, name, ip string, grace int64) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "web"}, Finalizers: []string{"test.zerodrop.dev/keep"}},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, pod, client.GracePeriodSeconds(grace)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var p corev1.Pod
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), &p); err == nil {
			p.Finalizers = nil
			_ = c.Update(context.Background(), &p)
		}
	})
	var got corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

// call is the pod's preStop drain call; it returns the answer's body
// ("drained", "timeout", …) or the error.
func call(base string, pod *corev1.Pod, timeout time.Duration) string {
	client := &http.Client{Timeout: timeout}
	resp, err := client.Get(fmt.Sprintf("%s%s?pod=%s/%s", base, drain.Path, pod.Namespace, pod.Name))
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(body))
}
