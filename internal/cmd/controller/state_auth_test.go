package controller

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/podgate"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/dataplane"
	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestStateEndpointRefusesUnauthenticated (issue 28): a data-plane
// replica's state endpoint answers nothing to a caller that is not the
// control role: not in the clear, not over TLS without the control role's
// client certificate.
func TestStateEndpointRefusesUnauthenticated(t *testing.T) {
	restCfg := controlplane.Start(t)
	c := testutil.Client(t, restCfg)
	dir := t.TempDir()
	t.Cleanup(func() { testutil.StopHAProxy(t, dir) })
	const ip = "127.0.94.1"
	addr := net.JoinHostPort(ip, strconv.Itoa(testutil.FreePort(t)))
	replicaPod(t, restCfg, c, "dp-auth", ip)
	dataPlaneReplica(t, restCfg, c, "dp-auth", dir, addr)
	testutil.Eventually(t, 60*time.Second, "the state endpoint to listen", func() (bool, string) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	})

	path := dataplane.BackendsPath + "?key=default/anything"
	plain := &http.Client{Timeout: 5 * time.Second}
	if resp, err := plain.Get("http://" + addr + path); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || json.Valid(body) {
			t.Fatalf("plain HTTP got %s: %q", resp.Status, body)
		}
	}
	// TLS without the control role's client certificate: no answer.
	anon := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test is the attacker
	if resp, err := anon.Get("https://" + addr + path); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("TLS without a client certificate got %s: %q", resp.Status, body)
	}
}

// squatter stands in for a process that took a replica's state port while
// the replica's zerodrop process is down, and answers what would open the
// gates: every backend healthy, or none at all (drained).
type squatter struct {
	srv     *httptest.Server
	drained atomic.Bool
}

func startSquatter(t *testing.T, addr string, tlsToo bool, lbs func(key string) []provider.BackendStatus) *squatter {
	t.Helper()
	s := &squatter{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+dataplane.BackendsPath, func(w http.ResponseWriter, r *http.Request) {
		out := []provider.BackendStatus{}
		if !s.drained.Load() {
			out = lbs(r.URL.Query().Get("key"))
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("GET "+dataplane.LoadBalancerPath, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("null"))
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s.srv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: mux}}
	if tlsToo {
		s.srv.StartTLS()
	} else {
		s.srv.Start()
	}
	return s
}

// TestSquatterNeverOpensGate (issue 28): while a replica's zerodrop process
// is down, a process that binds its state port and answers — a healthy
// backend, or no backend (drained) — in the clear or over TLS with a
// certificate of its own, opens neither the readiness gate nor the
// termination gate: the gates wait for the replica itself.
func TestSquatterNeverOpensGate(t *testing.T) {
	restCfg := controlplane.Start(t)
	c := testutil.Client(t, restCfg)
	ctx := context.Background()
	const ns, name, podIP = "default", "sq", "198.18.65.1"
	statePort := testutil.FreePort(t)
	const replicaIP = "127.0.94.2"
	replicaPod(t, restCfg, c, "dp-sq", replicaIP)

	cfg := baseConfig(restCfg)
	cfg.ReadinessGate = true
	drainPort := testutil.FreePort(t)
	cfg.DrainAddr = "127.0.0.1:" + strconv.Itoa(drainPort)
	cfg.DataPlane = RoleConfig{Role: "control", Namespace: "kube-system", Selector: dataPlaneSelector, StatePort: statePort}
	runProcess(t, cfg)

	listener := model.ListenerName(ns, name, corev1.ProtocolTCP, 80)
	// The backend's address is the pod's through baseConfig's AddressMap.
	const backendIP = "127.18.65.1"
	healthy := func(string) []provider.BackendStatus {
		return []provider.BackendStatus{{Listener: listener, Address: backendIP, Port: 8080, State: model.Active,
			Healthy: true, HealthKnown: true}}
	}
	for _, tlsToo := range []bool{false, true} {
		sq := startSquatter(t, net.JoinHostPort(replicaIP, strconv.Itoa(statePort)), tlsToo, healthy)
		podName := fmt.Sprintf("sq-%v", tlsToo)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: podName, Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{NodeName: "node-1", TerminationGracePeriodSeconds: ptr.To(int64(120)),
				ReadinessGates: []corev1.PodReadinessGate{{ConditionType: podgate.ConditionType}},
				Containers:     []corev1.Container{{Name: "app", Image: "app"}}},
		}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podIP, PodIPs: []corev1.PodIP{{IP: podIP}},
			Conditions: []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}}
		if err := c.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if !tlsToo {
			if err := c.Create(ctx, testutil.LBService(ns, name, "zerodrop.dev/haproxy", 80, 8080)); err != nil {
				t.Fatal(err)
			}
		}
		sl := testutil.Slice(ns, name, 8080, podIP)
		sl.Name = name + "-" + podName
		sl.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: podName}
		if err := c.Create(ctx, sl); err != nil {
			t.Fatal(err)
		}

		// Readiness: the squatter says the pod's backend is healthy.
		deadline := time.Now().Add(10 * time.Second) // many of the gate's 0.5 s polls
		for time.Now().Before(deadline) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
				t.Fatal(err)
			}
			for _, cond := range pod.Status.Conditions {
				if cond.Type == podgate.ConditionType && cond.Status == corev1.ConditionTrue {
					t.Fatalf("tls=%v: the readiness gate opened on the squatter's answer: %s", tlsToo, cond.Message)
				}
			}
			time.Sleep(500 * time.Millisecond)
		}

		// Termination: the squatter says nothing has the pod any more.
		sq.drained.Store(true)
		if err := c.Delete(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(sl), sl); err != nil {
			t.Fatal(err)
		}
		sl.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
		if err := c.Update(ctx, sl); err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Timeout: 10 * time.Second}
		resp, err := hc.Get(fmt.Sprintf("http://%s%s?pod=%s/%s", cfg.DrainAddr, drain.Path, ns, podName))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if r := resp.Header.Get(drain.ResultHeader); r == "drained" {
				t.Fatalf("tls=%v: the drain call answered %q on the squatter's answer", tlsToo, r)
			}
		}
		sq.srv.Close()
	}
}
