// The upstream service controller has a data race of its own (k8s.io/cloud-provider
// v0.37.2, controllers/service: processServiceCreateOrUpdate sets
// cachedService.state without the cache's lock, which allServices reads under
// it), so the race detector fails any test that runs it. These tests run
// without it: `make test` runs them in a second `go test` without -race.

//go:build !race

package upstream

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	cloudprovider "k8s.io/cloud-provider"

	"zerodrop.dev/zerodrop/internal/controlplane"
)

// counted is the cloud with its finished EnsureLoadBalancer calls counted.
type counted struct {
	*Cloud
	ensured *atomic.Int64
}

func (c counted) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	lb, ok := c.Cloud.LoadBalancer()
	return countedLB{lb, c.ensured}, ok
}

type countedLB struct {
	cloudprovider.LoadBalancer
	ensured *atomic.Int64
}

func (l countedLB) EnsureLoadBalancer(ctx context.Context, cluster string, svc *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	st, err := l.LoadBalancer.EnsureLoadBalancer(ctx, cluster, svc, nodes)
	l.ensured.Add(1)
	return st, err
}

// startHAProxy starts HAProxy in master-worker mode in dir with the
// cloud's configuration of no load balancer, as the lab starts one before
// the controller, and stops it at the test's end.
func startHAProxy(t *testing.T, h *HAProxy) {
	t.Helper()
	if _, err := exec.LookPath("haproxy"); err != nil {
		t.Skip("no haproxy (hack/setup-haproxy.sh installs it)")
	}
	cfg, err := h.render(State{})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(h.Config, cfg); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("haproxy", "-W", "-S", h.MasterSocket+",mode,600", "-f", h.Config)
	log, err := os.Create(filepath.Join(filepath.Dir(h.Config), "haproxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		// The master and its workers, old ones included, are one process
		// group.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		log.Close()
	})
	eventually(t, 10*time.Second, "HAProxy to run the initial configuration", func() (bool, string) {
		d, err := h.Running(context.Background())
		return err == nil && d == description(cfg), fmt.Sprint(d, err)
	})
}

// reloads is how many times HAProxy's master has reloaded (`show proc`).
func reloads(t *testing.T, h *HAProxy) int {
	t.Helper()
	// The master re-executes itself for a reload and refuses connections
	// until it is back: for seconds on a loaded machine (seen beside
	// stress-ng --cpu 2). Ask again until it answers, within a bound.
	var out string
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; {
		if out, err = cli(context.Background(), h.MasterSocket, "show proc"); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[1] == "master" {
			n, err := strconv.Atoi(f[2])
			if err != nil {
				t.Fatalf("show proc: %q", line)
			}
			return n
		}
	}
	t.Fatalf("show proc: no master in %q", out)
	return 0
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
	}
	t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, last)
}

// serveHealthz serves kube-proxy's health check stand-in on addr: GET
// /healthz answers code (loaded at each request).
func serveHealthz(t *testing.T, addr string, code *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(int(code.Load()))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// TestUpstreamServiceController runs the real service controller of
// k8s.io/cloud-provider on the real API server with the lab's Azure-like
// cloud on a real HAProxy, read back through HAProxy's own runtime API
// (`show stat`, `show proc`) and the configuration file, and pins the
// behaviours of cloud-provider-azure the cloud copies:
//   - a LoadBalancer Service without a class gets a load balancer: a rule
//     named <"a"+UID>-TCP-<port> on a frontend address of the pool, every
//     node at the nodePort, and its status;
//   - externalTrafficPolicy Local: the probe is HTTP GET /healthz on the
//     health-check node port, 200 passes, anything else fails, and a node
//     enters rotation after 2 passing probes and leaves it after 2 failing
//     ones, 5 s apart; a node new to the pool starts out of rotation;
//   - a node that joins is added; one that leaves is removed at once;
//   - a restart with nothing changed writes nothing (no reload, the same
//     file);
//   - the Service's deletion deletes the load balancer.
func TestUpstreamServiceController(t *testing.T) {
	env := controlplane.StartEnv(t)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	ctx := context.Background()
	h := NewHAProxy(t.TempDir(), "")
	startHAProxy(t, h)
	pool := netip.MustParsePrefix("127.0.113.0/24")

	addNode := func(name, ip string, labels map[string]string) {
		t.Helper()
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setExcluded := func(name string, excluded bool) {
		t.Helper()
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		if excluded {
			n.Labels[corev1.LabelNodeExcludeBalancers] = ""
		} else {
			delete(n.Labels, corev1.LabelNodeExcludeBalancers)
		}
		if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	addNode("node-a", "127.0.114.1", nil)
	addNode("node-b", "127.0.114.2", nil)

	var ensured atomic.Int64
	start := func() (stop func()) {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := Run(cctx, env.Config, counted{NewCloud(h, pool), &ensured}); err != nil {
				t.Error(err)
			}
		}()
		return func() { cancel(); <-done }
	}
	stop := start()

	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	np, hc := svc.Spec.Ports[0].NodePort, svc.Spec.HealthCheckNodePort
	lbName := LoadBalancerName(svc)
	rule := lbName + "-TCP-80"

	// kube-proxy's health check node port on each node: node-a has a local
	// endpoint, node-b has none.
	var codeA, codeB, codeC atomic.Int32
	codeA.Store(http.StatusOK)
	codeB.Store(http.StatusServiceUnavailable)
	codeC.Store(http.StatusOK)
	serveHealthz(t, fmt.Sprintf("127.0.114.1:%d", hc), &codeA)
	serveHealthz(t, fmt.Sprintf("127.0.114.2:%d", hc), &codeB)
	serveHealthz(t, fmt.Sprintf("127.0.114.3:%d", hc), &codeC)

	// backends reads the rule's backends: "node=address:port status".
	backends := func() ([]Backend, string) {
		bs, err := ReadBackends(ctx, h.AdminSocket, lbName)
		if err != nil {
			return nil, err.Error()
		}
		var got []string
		for _, b := range bs {
			got = append(got, fmt.Sprintf("%s=%s:%d %s (%s)", b.Node, b.Address, b.BackendPort, b.Status, b.CheckStatus))
		}
		return bs, strings.Join(got, ", ")
	}
	// pollStatus waits for the backends to be want's nodes with want's
	// statuses; a status ending in "*" is a prefix.
	pollStatus := func(what string, want map[string]string) {
		t.Helper()
		eventually(t, 60*time.Second, what, func() (bool, string) {
			bs, got := backends()
			if len(bs) != len(want) {
				return false, got
			}
			for _, b := range bs {
				w, ok := want[b.Node]
				match := b.Status == w
				if p, isPrefix := strings.CutSuffix(w, "*"); isPrefix {
					match = strings.HasPrefix(b.Status, p)
				}
				if !ok || !match || b.Rule != rule || b.Port != 80 || b.BackendPort != np {
					return false, got
				}
			}
			return true, got
		})
	}

	// The first sight of the load balancer: both nodes, not yet probed,
	// out of rotation.
	eventually(t, 60*time.Second, "the load balancer", func() (bool, string) {
		bs, got := backends()
		return len(bs) == 2, got
	})
	bs, got := backends()
	for _, b := range bs {
		if b.Up() && (b.CheckStatus == "INI" || b.CheckStatus == "") {
			t.Errorf("a node new to the pool is in rotation before any probe: %s", got)
		}
	}
	cfg, err := os.ReadFile(h.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"listen " + rule + "\n",
		"    option httpchk GET /healthz\n",
		fmt.Sprintf("    server node-a 127.0.114.1:%d check inter 5s rise 2 fall 2 port %d\n", np, hc),
		fmt.Sprintf("    server node-b 127.0.114.2:%d check inter 5s rise 2 fall 2 port %d\n", np, hc),
	} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("configuration lacks %q:\n%s", want, cfg)
		}
	}
	var addr string
	eventually(t, 60*time.Second, "the Service's status", func() (bool, string) {
		s, err := cs.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ok := len(s.Status.LoadBalancer.Ingress) == 1 && pool.Contains(netip.MustParseAddr(s.Status.LoadBalancer.Ingress[0].IP))
		if ok {
			addr = s.Status.LoadBalancer.Ingress[0].IP
		}
		return ok, fmt.Sprint(s.Status.LoadBalancer)
	})
	if !strings.Contains(string(cfg), fmt.Sprintf("    bind %s:80\n", addr)) {
		t.Errorf("configuration does not bind the Service's address %s:\n%s", addr, cfg)
	}

	// The probe: node-a (200) enters rotation after two passing probes 5 s
	// apart, node-b (503) stays out.
	began := time.Now()
	pollStatus("node-a up on its health check, node-b down on its 503", map[string]string{"node-a": "UP", "node-b": "DOWN"})
	if d := time.Since(began); d > 25*time.Second {
		t.Errorf("node-a took %s to enter rotation", d)
	}
	// node-a's last local endpoint goes: one failed probe keeps it in
	// rotation ("UP 1/2"), the second takes it out, 5 s later.
	codeA.Store(http.StatusServiceUnavailable)
	pollStatus("node-a's first failed probe", map[string]string{"node-a": "UP 1/2", "node-b": "DOWN"})
	began = time.Now()
	pollStatus("node-a out of rotation after its second failed probe", map[string]string{"node-a": "DOWN", "node-b": "DOWN"})
	if d := time.Since(began); d < 3*time.Second || d > 8*time.Second {
		t.Errorf("node-a left rotation %s after its first failed probe, want about 5 s", d)
	}
	// node-b gets a local endpoint: "DOWN 1/2" after one passing probe.
	codeB.Store(http.StatusOK)
	pollStatus("node-b's first passing probe", map[string]string{"node-a": "DOWN", "node-b": "DOWN 1/2"})
	pollStatus("node-b in rotation after its second", map[string]string{"node-a": "DOWN", "node-b": "UP"})

	// A node joins. The service controller syncs the pool on a node's
	// creation, not on its address, which this test (no kubelet) sets after
	// creating it; a cloud finds its instances by provider ID. So the node
	// joins excluded and is then included: the label's removal is one of the
	// service controller's sync triggers (KEP-3458). The nodes already in
	// the pool keep their probe state across the write.
	addNode("node-c", "127.0.114.3", map[string]string{corev1.LabelNodeExcludeBalancers: ""})
	setExcluded("node-c", false)
	pollStatus("node-c in the pool, out of rotation until probed; the others as they were",
		map[string]string{"node-a": "DOWN", "node-b": "UP", "node-c": "DOWN*"})
	pollStatus("node-c in rotation after two passing probes", map[string]string{"node-a": "DOWN", "node-b": "UP", "node-c": "UP"})

	// A node leaves the pool: removed at once, in one write.
	before := reloads(t, h)
	setExcluded("node-c", true)
	pollStatus("node-c removed", map[string]string{"node-a": "DOWN", "node-b": "UP"})
	if n := reloads(t, h) - before; n != 1 {
		t.Errorf("removing a node took %d reloads, want 1", n)
	}

	// Restart with nothing changed: the service controller ensures every
	// Service again, and nothing is written.
	stop()
	cfg, err = os.ReadFile(h.Config)
	if err != nil {
		t.Fatal(err)
	}
	before = reloads(t, h)
	ensured.Store(0)
	stop = start()
	eventually(t, 60*time.Second, "the restarted controller to ensure the Service", func() (bool, string) {
		return ensured.Load() > 0, "not yet"
	})
	if n := reloads(t, h) - before; n != 0 {
		t.Errorf("a restart with nothing changed reloaded HAProxy %d times", n)
	}
	if now, err := os.ReadFile(h.Config); err != nil || string(now) != string(cfg) {
		t.Errorf("a restart with nothing changed rewrote the configuration (%v)", err)
	}

	if err := cs.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the load balancer deleted with its Service", func() (bool, string) {
		bs, got := backends()
		st, _, err := h.Read()
		return len(bs) == 0 && err == nil && len(st.LoadBalancers) == 0, fmt.Sprint(got, st, err)
	})
	if cfg, err := os.ReadFile(h.Config); err != nil || strings.Contains(string(cfg), lbName) {
		t.Errorf("the deleted load balancer is still in the configuration (%v):\n%s", err, cfg)
	}
	stop()
}
