package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
)

// TestGatesMemory covers the logic of both gates with a provider whose
// health and connections the test controls: the readiness gate waits for a
// registered and healthy backend; the drain endpoint refuses live and unknown
// pods and answers once the pod's backend is in drain (no new connections),
// while it still has connections; it is removed once they end.
func TestGatesMemory(t *testing.T) {
	cfg := controlplane.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	prov := memory.New(provider.Hooks{})
	const ns, app = "default", "shop"
	listener := model.ListenerName(ns, app, corev1.ProtocolTCP, 80)
	if err := c.Create(ctx, lbService(ns, app, "zerodrop.dev/memory", 80, 8080)); err != nil {
		t.Fatal(err)
	}
	gatedPod(t, c, ns, "shop-a", app, "198.18.1.1")
	// The new pod's checks fail at first: the gate must wait.
	prov.SetHealthy(listener, "127.18.1.1:8080", false)
	// Not ready: the gate is pending, as the EndpointSlice controller shows it.
	setSlice(t, c, ns, app, 8080, endpoint{ip: "198.18.1.1", pod: "shop-a"})
	ctrl := startController(t, cfg, prov, nil, controllerOptions{})
	defer ctrl.stop(t)

	eventually(t, 20*time.Second, "gate-pending pod registered", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/"+app)
		return len(backendsOf(lb)) == 1, fmt.Sprint(backendsOf(lb))
	})
	time.Sleep(time.Second)
	if gateTrue(t, c, ns, "shop-a") {
		t.Fatal("readiness gate opened while the load balancer reports the backend unhealthy")
	}
	prov.SetHealthy(listener, "127.18.1.1:8080", true)
	eventually(t, 10*time.Second, "readiness gate True", func() (bool, string) { return gateTrue(t, c, ns, "shop-a"), "" })

	get := func(query string) (int, string, string) {
		resp, err := http.Get(ctrl.drainURL + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get(drain.ResultHeader), string(body)
	}
	eventually(t, 10*time.Second, "drain endpoint up", func() (bool, string) {
		resp, err := http.Get(ctrl.drainURL)
		if err == nil {
			resp.Body.Close()
		}
		return err == nil, fmt.Sprint(err)
	})
	// Refused, and alike: the answer does not tell a caller which pods exist.
	liveCode, _, liveBody := get("?pod=default/shop-a")
	if code, _, body := get("?pod=default/nope"); code != http.StatusNotFound || code != liveCode || body != liveBody {
		t.Fatalf("drain of a live pod: %d %q, of an unknown pod: %d %q; want the same 404", liveCode, liveBody, code, body)
	}
	if lb, _ := prov.Observe(ctx, ns+"/"+app); len(backendsOf(lb)) != 1 || backendsOf(lb)[0] != "127.18.1.1:8080=active" {
		t.Fatalf("refused drain calls changed the load balancer: %v", backendsOf(lb))
	}

	// The pod is deleted: it terminates (scheduled, so the grace period
	// applies) and its endpoint turns terminating but still serving.
	prov.SetConnections(listener, "127.18.1.1:8080", 2)
	var pod corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-a"}, &pod); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &pod); err != nil {
		t.Fatal(err)
	}
	setSlice(t, c, ns, app, 8080, endpoint{ip: "198.18.1.1", pod: "shop-a", serving: true, terminating: true})
	type answer struct {
		code   int
		result string
		at     time.Time
	}
	// The last instant the load balancer had the backend active.
	stopWatch := watchPresent(t, func() bool {
		lb, _ := prov.Observe(ctx, ns+"/"+app)
		return fmt.Sprint(backendsOf(lb)) == "[127.18.1.1:8080=active]"
	})
	answered := make(chan answer, 1)
	go func() {
		code, result, _ := get("?pod=default/shop-a&uid=" + string(pod.UID))
		answered <- answer{code, result, time.Now()}
	}()
	var a answer
	select {
	case a = <-answered:
	case <-time.After(15 * time.Second):
		t.Fatal("drain did not answer after the backend went into drain")
	}
	if a.code != http.StatusOK || a.result != "drained" {
		t.Fatalf("drain answered %d %q, want 200 drained", a.code, a.result)
	}
	if seen := stopWatch(); seen.After(a.at) {
		t.Fatalf("drain answered at %s, but the load balancer still had the backend active at %s", a.at.Format(time.StampMicro), seen.Format(time.StampMicro))
	}
	// Answered at drain: the backend, which still has connections, stays
	// in drain until they end; then it is removed.
	if lb, _ := prov.Observe(ctx, ns+"/"+app); fmt.Sprint(backendsOf(lb)) != "[127.18.1.1:8080=draining]" {
		t.Fatalf("after the answer the load balancer has %v, want the backend draining", backendsOf(lb))
	}
	prov.SetConnections(listener, "127.18.1.1:8080", 0)
	eventually(t, 15*time.Second, "the drained backend removed", func() (bool, string) {
		lb, _ := prov.Observe(ctx, ns+"/"+app)
		return len(backendsOf(lb)) == 0, fmt.Sprint(backendsOf(lb))
	})
}
