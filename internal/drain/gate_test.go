package drain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/metrics"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// The pure logic of the gate: a fake cluster (one Service selecting pod
// ns/web) and a provider whose answers each test scripts. The same
// behaviour on the real apiserver and HAProxy is in internal/e2e.

var testListener = model.ListenerName("ns", "web", corev1.ProtocolTCP, 80)

// registered is pod ns/web's backend, still active (taking new
// connections) with 7 connections: a call waits.
var registered = []provider.BackendStatus{{Listener: testListener, Address: "10.0.0.1", Port: 8080,
	State: model.Active, Healthy: true, HealthKnown: true, Connections: 7}}

// draining is the same backend in drain: no new connection reaches it, the
// 7 it has go on.
var draining = []provider.BackendStatus{{Listener: testListener, Address: "10.0.0.1", Port: 8080,
	State: model.Draining, Healthy: true, HealthKnown: true, Connections: 7}}

type allManaged struct{}

func (allManaged) Managed(*corev1.Service) bool { return true }
func (allManaged) Key(s *corev1.Service) string { return s.Namespace + "/" + s.Name }

// scripted is a provider whose Backends answers are the test's.
type scripted struct {
	backends func(ctx context.Context) ([]provider.BackendStatus, error)
}

func (scripted) Name() string                                                 { return "scripted" }
func (scripted) Unsupported() map[model.Protocol]bool                         { return nil }
func (scripted) Observe(context.Context, string) (*model.LoadBalancer, error) { return nil, nil }
func (scripted) Apply(context.Context, model.Plan) error                      { return nil }
func (scripted) Delete(context.Context, string) error                         { return nil }
func (p scripted) Backends(ctx context.Context, _ string) ([]provider.BackendStatus, error) {
	return p.backends(ctx)
}

// countingReader counts the reads of pods (one per call that finds its pod).
type countingReader struct {
	client.Reader
	gets atomic.Int64
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Pod); ok {
		r.gets.Add(1)
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// gateFixture is pod ns/web, deleted grace ago-from-now (its deletion
// timestamp is now+grace), a live pod ns/live, and the Service selecting
// them; the handler asks prov.
func gateFixture(t *testing.T, grace time.Duration, prov provider.Provider, o Options) (*Handler, *countingReader, *corev1.Pod) {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u1", Labels: map[string]string{"app": "web"},
		Finalizers: []string{"test/keep"}, DeletionTimestamp: &metav1.Time{Time: time.Now().Add(grace)},
		DeletionGracePeriodSeconds: ptr.To(int64(grace / time.Second))},
		Status: corev1.PodStatus{PodIP: "10.0.0.1"}}
	live := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "live", UID: "u2", Labels: map[string]string{"app": "web"}},
		Status: corev1.PodStatus{PodIP: "10.0.0.2"}}
	reader := &countingReader{Reader: fake.NewClientBuilder().WithObjects(svc, pod, live).Build()}
	o.Reader = reader
	o.Finder = &lbtarget.Finder{Reader: reader, Services: allManaged{}, Provider: prov}
	o.Logger = testr.New(t)
	if o.PollInterval == 0 {
		o.PollInterval = 10 * time.Millisecond
	}
	if o.CacheLag == 0 {
		o.CacheLag = 50 * time.Millisecond
	}
	var got corev1.Pod
	if err := reader.Get(context.Background(), client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatal(err)
	}
	reader.gets.Store(0)
	return NewHandler(o), reader, &got
}

type gateAnswer struct {
	code   int
	result string
	body   string
	err    error
}

func callGate(ctx context.Context, url string) gateAnswer {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return gateAnswer{err: err}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return gateAnswer{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return gateAnswer{code: resp.StatusCode, result: resp.Header.Get(ResultHeader), body: string(body), err: err}
}

// TestTransientErrorKeepsWaiting: a provider error (HAProxy's socket busy
// during a reload, Azure throttling) is not the answer: the gate looks again
// until the pod's deadline, and answers drained once the backend is in drain
// (or gone), never while it is active.
func TestTransientErrorKeepsWaiting(t *testing.T) {
	var reads atomic.Int64
	var removedSeen atomic.Bool
	prov := scripted{backends: func(context.Context) ([]provider.BackendStatus, error) {
		switch n := reads.Add(1); {
		case n <= 3:
			return nil, errors.New("master socket busy")
		case n <= 5:
			return registered, nil
		default:
			removedSeen.Store(true)
			return nil, nil
		}
	}}
	h, _, _ := gateFixture(t, time.Minute, prov, Options{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	a := callGate(context.Background(), srv.URL+Path+"?pod=ns/web")
	if a.err != nil || a.code != http.StatusOK || a.result != "drained" {
		t.Fatalf("got %d %q %q (%v), want 200 drained", a.code, a.result, a.body, a.err)
	}
	if !removedSeen.Load() {
		t.Fatalf("answered drained before the provider reported the backend removed (%d reads)", reads.Load())
	}
}

// TestAnswersAtDrain: the call answers drained as soon as the load balancer
// shows the pod's backend in drain — no new connection can reach the pod —
// while the backend still has connections and is not removed: those end
// when the pod closes them after SIGTERM (invariant 6). Waiting for the
// removal instead held every pod with a keep-alive or WebSocket client until
// its deadline, and the answer was timeout.
func TestAnswersAtDrain(t *testing.T) {
	var reads, activeReads atomic.Int64
	prov := scripted{backends: func(context.Context) ([]provider.BackendStatus, error) {
		if reads.Add(1) <= 3 {
			activeReads.Add(1)
			return registered, nil
		}
		return draining, nil
	}}
	// Grace 6 s: the deadline is 4 s away (a third kept for the shutdown).
	h, _, _ := gateFixture(t, 6*time.Second, prov, Options{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	a := callGate(context.Background(), srv.URL+Path+"?pod=ns/web")
	if a.err != nil || a.code != http.StatusOK || a.result != "drained" {
		t.Fatalf("got %d %q %q (%v) after %d reads, want 200 drained while the backend drains with connections",
			a.code, a.result, a.body, a.err, reads.Load())
	}
	if n := activeReads.Load(); n < 3 {
		t.Fatalf("answered after %d reads of the active backend, want it to wait through all 3", n)
	}
}

// TestAnswersAreTerse: any pod can call the endpoint, so the answer says
// drained or timeout and nothing about listeners or connections, and a
// refusal is the same whether the pod is unknown, live or another one.
func TestAnswersAreTerse(t *testing.T) {
	prov := scripted{backends: func(context.Context) ([]provider.BackendStatus, error) { return registered, nil }}
	// Grace 3s: the budget is 1s, so the deadline is about 2s away.
	h, _, pod := gateFixture(t, 3*time.Second, prov, Options{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	a := callGate(context.Background(), srv.URL+Path+"?pod=ns/web")
	if a.err != nil || a.code != http.StatusOK || a.result != "timeout" {
		t.Fatalf("got %d %q %q (%v), want 200 timeout", a.code, a.result, a.body, a.err)
	}
	if deadline := pod.DeletionTimestamp.Add(-time.Second); time.Now().Before(deadline) {
		t.Fatalf("answered timeout before the pod's deadline %s", deadline)
	}
	for _, leak := range []string{testListener, "7", "connection", "draining", "ns/web"} {
		if strings.Contains(a.body, leak) {
			t.Errorf("timeout answer %q tells %q", a.body, leak)
		}
	}
	refusals := map[string]gateAnswer{}
	for _, q := range []string{"ns/live", "ns/nope", "other/web", "ns/web&uid=someone-else"} {
		refusals[q] = callGate(context.Background(), srv.URL+Path+"?pod="+q)
	}
	want := refusals["ns/nope"]
	for q, a := range refusals {
		if a.err != nil || a.code != want.code || a.body != want.body || a.code < 400 {
			t.Errorf("pod=%s: %d %q (%v); an unknown pod: %d %q — a refusal must not tell them apart", q, a.code, a.body, a.err, want.code, want.body)
		}
	}
}

// TestOnePollerPerPod: callers of one pod (the hook of each container, a
// retry) share one wait loop, so K callers cost the provider what one does.
func TestOnePollerPerPod(t *testing.T) {
	const k = 5
	var mu sync.Mutex
	// A wait loop is known by its context's Done channel: each loop has a
	// deadline context of its own, and a read's context is derived from it
	// (the Finder adds values), so the channel is the loop's.
	loops := map[<-chan struct{}]bool{}
	var h *Handler
	prov := scripted{backends: func(ctx context.Context) ([]provider.BackendStatus, error) {
		mu.Lock()
		loops[ctx.Done()] = true
		n := len(loops)
		mu.Unlock()
		h.mu.Lock()
		joined := 0
		for _, p := range h.polls {
			joined = max(joined, p.callers)
		}
		h.mu.Unlock()
		// Registered until every caller waits, on one shared loop or (were
		// the loop not shared) on k loops of its own: no caller can be
		// answered before all have joined, however slow the machine.
		if joined < k && n < k {
			return registered, nil
		}
		return nil, nil
	}}
	h, _, _ = gateFixture(t, time.Minute, prov, Options{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	answers := make(chan gateAnswer, k)
	for i := 0; i < k; i++ {
		go func() { answers <- callGate(context.Background(), srv.URL+Path+"?pod=ns/web") }()
	}
	for i := 0; i < k; i++ {
		if a := <-answers; a.err != nil || a.code != http.StatusOK || a.result != "drained" {
			t.Fatalf("caller got %d %q %q (%v), want 200 drained", a.code, a.result, a.body, a.err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(loops) != 1 {
		t.Fatalf("%d callers of one pod ran %d wait loops, want 1", k, len(loops))
	}
}

// TestCallsOverTheBoundAreRefused: the endpoint holds at most MaxCalls
// calls; one more is refused at once with a short answer and counted, and
// a slot is free again once a call ends.
func TestCallsOverTheBoundAreRefused(t *testing.T) {
	m, err := metrics.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	prov := scripted{backends: func(context.Context) ([]provider.BackendStatus, error) { return registered, nil }}
	// Grace 30s: a call is held about 25s, unless refused.
	h, _, _ := gateFixture(t, 30*time.Second, prov, Options{MaxCalls: 2, Metrics: m})
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	held := make(chan gateAnswer, 2)
	for i := 0; i < 2; i++ {
		go func() { held <- callGate(ctx, srv.URL+Path+"?pod=ns/web") }()
	}
	// A call reads its pod before it takes a slot: wait for the slots.
	testutil.Eventually(t, 20*time.Second, "two calls held", func() (bool, string) {
		return len(h.slots) == 2, fmt.Sprint(len(h.slots), " slots taken")
	})
	a := callGate(context.Background(), srv.URL+Path+"?pod=ns/web")
	if a.err != nil || a.code != http.StatusServiceUnavailable || len(a.body) > 40 {
		t.Fatalf("third call got %d %q (%v), want a short 503", a.code, a.body, a.err)
	}
	if got := metrics.Sum(m.DrainCalls); got != 1 {
		t.Fatalf("drain calls counted %v, want the one refused", got)
	}
	cancel()
	for i := 0; i < 2; i++ {
		<-held
	}
	// The slots are free: a call is served again (refused: ns/live lives).
	testutil.Eventually(t, 20*time.Second, "a slot free again", func() (bool, string) {
		a := callGate(context.Background(), srv.URL+Path+"?pod=ns/live")
		return a.err == nil && a.code != http.StatusServiceUnavailable, fmt.Sprint(a.code, a.body, a.err)
	})
}

// startServer serves h on a free loopback port as the controller does.
func startServer(t *testing.T, s *Server) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	ln.Close()
	s.Logger = testr.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- s.Start(ctx) }()
	testutil.Eventually(t, 20*time.Second, "drain endpoint up", func() (bool, string) {
		c, err := net.Dial("tcp", s.Addr)
		if err == nil {
			c.Close()
		}
		return err == nil, fmt.Sprint(err)
	})
	return s.Addr, func() {
		cancel()
		if err := <-started; err != nil {
			t.Error(err)
		}
		s.Wait()
	}
}

// TestStoppingReplicaAnswersUntilTheDeadline: a replica that stops answers
// the calls it holds until their pod's deadline, however short its own
// shutdown timeout: cutting them would fail the preStop hook.
func TestStoppingReplicaAnswersUntilTheDeadline(t *testing.T) {
	var once sync.Once
	looking := make(chan struct{})
	prov := scripted{backends: func(context.Context) ([]provider.BackendStatus, error) {
		once.Do(func() { close(looking) })
		return registered, nil
	}}
	// Grace 6s: the budget is 2s, so the deadline is about 4s away, past
	// the 1s shutdown timeout.
	h, _, pod := gateFixture(t, 6*time.Second, prov, Options{})
	addr, stop := startServer(t, &Server{Handler: h, ShutdownTimeout: time.Second})
	answer := make(chan gateAnswer, 1)
	go func() { answer <- callGate(context.Background(), "http://"+addr+Path+"?pod=ns/web") }()
	<-looking
	stop()
	a := <-answer
	if a.err != nil || a.code != http.StatusOK || a.result != "timeout" {
		t.Fatalf("call held at shutdown got %d %q %q (%v), want 200 timeout at its deadline", a.code, a.result, a.body, a.err)
	}
	if deadline := pod.DeletionTimestamp.Add(-2 * time.Second); time.Now().Before(deadline) {
		t.Fatalf("answered before the pod's deadline %s", deadline)
	}
}

// TestServerClosesSlowAndIdleConnections: a connection that sends its
// headers a byte at a time, or that stays idle after an answer, is closed
// by the server instead of holding a connection forever.
func TestServerClosesSlowAndIdleConnections(t *testing.T) {
	h, _, _ := gateFixture(t, time.Minute, scripted{backends: func(context.Context) ([]provider.BackendStatus, error) { return nil, nil }}, Options{})
	addr, stop := startServer(t, &Server{Handler: h, ReadHeaderTimeout: 300 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	defer stop()

	closed := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := io.Copy(io.Discard, c) // until the server closes it
		return err == nil || errors.Is(err, io.EOF) || !isTimeout(err)
	}
	t.Run("slow headers", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		done := make(chan bool, 1)
		go func() { done <- closed(c) }()
		fmt.Fprint(c, "GET /drain?pod=ns/web HTTP/1.1\r\n")
		for i := 0; ; i++ {
			select {
			case ok := <-done:
				if !ok {
					t.Fatal("connection not closed")
				}
				return
			case <-time.After(100 * time.Millisecond):
			}
			if i > 300 { // 30s of trickling headers
				t.Fatal("a connection sending its headers slowly was never closed")
			}
			fmt.Fprintf(c, "X-%d: y\r\n", i)
		}
	})
	t.Run("idle", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprint(c, "GET /drain HTTP/1.1\r\nHost: zerodrop\r\n\r\n") // 400, keep-alive
		if !closed(c) {
			t.Fatal("an idle connection stayed open 30s after its answer")
		}
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// keyedReader counts the reads of each pod, by namespace/name.
type keyedReader struct {
	client.Reader
	mu   sync.Mutex
	gets map[string]int
}

func (r *keyedReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Pod); ok {
		r.mu.Lock()
		r.gets[key.String()]++
		r.mu.Unlock()
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r *keyedReader) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gets[key]
}

// TestUnknownPodsLeaveSlotsForTerminatingPods: a call naming a pod the cache
// does not show (terminating, or at all) is held up to CacheLag, re-reading
// it; calls naming pods that do not exist fill the budget such calls have,
// and a call for a terminating pod must still be held and answered, not
// refused busy: the kubelet ignores a hook's answer, so the pod would get
// SIGTERM undrained.
func TestUnknownPodsLeaveSlotsForTerminatingPods(t *testing.T) {
	prov := scripted{backends: func(context.Context) ([]provider.BackendStatus, error) { return draining, nil }}
	// CacheLag 1 min: a call naming an unknown pod is held until the test
	// ends it.
	h, _, _ := gateFixture(t, time.Minute, prov, Options{MaxCalls: 2, CacheLag: time.Minute, PollInterval: 20 * time.Millisecond})
	reads := &keyedReader{Reader: h.opts.Reader, gets: map[string]int{}}
	h.opts.Reader = reads
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // before srv.Close: the held calls end

	// Calls naming pods that do not exist, one after the other, until one
	// is refused busy: the budget of such calls is full (it must be
	// bounded). A call read its pod twice is held, re-reading it.
	full := false
	for i := 0; !full; i++ {
		if i == 300 {
			t.Fatal("300 calls naming unknown pods held at once: their budget is not bounded")
		}
		key := fmt.Sprintf("ns/ghost-%d", i)
		answer := make(chan gateAnswer, 1)
		go func() { answer <- callGate(ctx, srv.URL+Path+"?pod="+key) }()
		testutil.Eventually(t, 20*time.Second, "the call for "+key+" held or refused", func() (bool, string) {
			select {
			case a := <-answer:
				if a.err != nil || a.code != http.StatusServiceUnavailable {
					t.Fatalf("call for %s answered %d %q (%v), want held or 503 busy", key, a.code, a.body, a.err)
				}
				full = true
				return true, ""
			default:
				n := reads.count(key)
				return n >= 2, fmt.Sprint(n, " reads of ", key)
			}
		})
	}
	a := callGate(context.Background(), srv.URL+Path+"?pod=ns/web")
	if a.err != nil || a.code != http.StatusOK || a.result != "drained" {
		t.Fatalf("with the budget of calls for unknown pods full, the terminating pod's call got %d %q %q (%v), want 200 drained",
			a.code, a.result, strings.TrimSpace(a.body), a.err)
	}
}
