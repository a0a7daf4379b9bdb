package drain

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// 2,000 pods terminating at once (a node drain of many nodes, a big
// rollout), their hooks called by the kubelets of 20 nodes (100 pods each,
// from the node's address, as a direct hook is): every call is held until
// the load balancer has the pods in drain, and every one is answered
// drained — none refused busy, which would stop its pod undrained.
func TestTwoThousandPodsTerminatingAreAllAnswered(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 calls")
	}
	const nodes, perNode = 20, 100
	const pods = nodes * perNode
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	objs := []client.Object{svc}
	active := make([]provider.BackendStatus, 0, pods)
	for i := 0; i < pods; i++ {
		ip := fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("web-%d", i),
			UID: types.UID(fmt.Sprintf("u%d", i)), Labels: map[string]string{"app": "web"}, Finalizers: []string{"test/keep"},
			DeletionTimestamp: &metav1.Time{Time: time.Now().Add(5 * time.Minute)}, DeletionGracePeriodSeconds: ptr.To(int64(300))},
			Status: corev1.PodStatus{PodIP: ip}})
		active = append(active, provider.BackendStatus{Listener: testListener, Address: ip, Port: 8080,
			State: model.Active, Healthy: true, HealthKnown: true})
	}
	reader := fake.NewClientBuilder().WithObjects(objs...).Build()
	// Every backend active until every call is held (or a bound passes:
	// then the test fails on the count), then none: all drained at once.
	var h *Handler
	var allHeld atomic.Bool
	giveUp := time.Now().Add(2 * time.Minute)
	prov := scripted{backends: func(context.Context) ([]provider.BackendStatus, error) {
		if allHeld.Load() || time.Now().After(giveUp) {
			return nil, nil
		}
		h.mu.Lock()
		n := len(h.held)
		h.mu.Unlock()
		if n >= pods {
			allHeld.Store(true)
			return nil, nil
		}
		return active, nil
	}}
	h = NewHandler(Options{Reader: reader, Finder: &lbtarget.Finder{Reader: reader, Services: allManaged{}, Provider: prov},
		PollInterval: 500 * time.Millisecond, CacheLag: time.Second, Logger: logr.Discard()})
	addr, stop := startServer(t, &Server{Handler: h})
	defer stop()

	var wg sync.WaitGroup
	var mu sync.Mutex
	answers := map[string]int{}
	for n := 0; n < nodes; n++ {
		// The node's kubelet: its own source address on the loopback.
		kubelet := &http.Client{Timeout: 6 * time.Minute, Transport: &http.Transport{DisableKeepAlives: true,
			DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(n+1))}}).DialContext}}
		for i := n * perNode; i < (n+1)*perNode; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a := "error"
				resp, err := kubelet.Get(fmt.Sprintf("http://%s%s?pod=ns/web-%d", addr, Path, i))
				if err == nil {
					a = fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get(ResultHeader))
					resp.Body.Close()
				} else {
					t.Logf("web-%d: %v", i, err)
				}
				mu.Lock()
				answers[a]++
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if !allHeld.Load() {
		t.Errorf("the %d calls were never all held at once", pods)
	}
	if answers["200 drained"] != pods {
		t.Fatalf("answers of %d pods terminating at once: %v, want all 200 drained", pods, answers)
	}
	testutil.Eventually(t, 20*time.Second, "no call held after the answers", func() (bool, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.held) == 0 && len(h.sources) == 0, fmt.Sprint(len(h.held), " held, ", len(h.sources), " sources")
	})
}

// A pod flooding the endpoint fills its own source's quota: its next call
// is refused busy at once, while a call from another address (another
// pod's relay, a node's kubelet) is still held and answered.
func TestOneSourceCannotTakeTheOthersCalls(t *testing.T) {
	var drainedNow atomic.Bool
	prov := scripted{backends: func(context.Context) ([]provider.BackendStatus, error) {
		if drainedNow.Load() {
			return draining, nil
		}
		return registered, nil
	}}
	h, _, _ := gateFixture(t, time.Minute, prov, Options{MaxCallsPerSource: 2})
	addr, stop := startServer(t, &Server{Handler: h})
	defer stop()
	from := func(ip byte) *http.Client {
		return &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
			DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 2, ip)}}).DialContext}}
	}
	url := "http://" + addr + Path + "?pod=ns/web"
	flood := from(1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < 2; i++ {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if resp, err := flood.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	testutil.Eventually(t, 20*time.Second, "the flood's two calls held", func() (bool, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.sources["127.0.2.1"] == 2, fmt.Sprint(h.sources)
	})
	resp, err := flood.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("the flood's third call got %d, want 503 busy at once", resp.StatusCode)
	}
	answer := make(chan string, 1)
	go func() {
		resp, err := from(2).Get(url)
		if err != nil {
			answer <- err.Error()
			return
		}
		resp.Body.Close()
		answer <- fmt.Sprint(resp.StatusCode, " ", resp.Header.Get(ResultHeader))
	}()
	testutil.Eventually(t, 20*time.Second, "the other source's call held", func() (bool, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.sources["127.0.2.2"] == 1, fmt.Sprint(h.sources)
	})
	drainedNow.Store(true)
	if got := <-answer; got != "200 drained" {
		t.Fatalf("the other source's call got %q, want 200 drained", got)
	}
}
