package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
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
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/webhook"
)

// The HAProxy master-busy tests (haproxy_stall_test.go) share this world:
// the real apiserver, the controller on a real HAProxy, one Service whose
// pods all carry the preStop drain call the webhook injects.

// readsSeen counts the drain endpoint's successful reads of the load
// balancer: a test stops the master only once the gate has looked at
// HAProxy and found the pod's server still active.
type readsSeen struct {
	provider.Provider
	ok atomic.Int64
}

func (r *readsSeen) Backends(ctx context.Context, key string) ([]provider.BackendStatus, error) {
	sts, err := r.Provider.Backends(ctx, key)
	if err == nil {
		r.ok.Add(1)
	}
	return sts, err
}

type stallWorld struct {
	c       client.Client
	host    string // the API server's address
	dir     string
	prov    *haproxy.Provider
	reads   *readsSeen
	ns, app string
	port    int
	lbAddr  string // host:port
	lbURL   string
	names   []string
	pods    map[string]*corev1.Pod
	ips     map[string]string
	servers map[string]string // pod name → its HAProxy server (host:port)
}

// newStallWorld serves pods <app>-<name> (198.18.<net>.<i+1>) through the
// controller's HAProxy, all ready and reached.
func newStallWorld(t *testing.T, app string, subnet int, names ...string) *stallWorld {
	t.Helper()
	cfg := controlplane.Start(t)
	w := &stallWorld{c: newClient(t, cfg), host: cfg.Host, dir: t.TempDir(), ns: "default", app: app, port: freePort(t),
		pods: map[string]*corev1.Pod{}, ips: map[string]string{}, servers: map[string]string{}}
	ctx := context.Background()
	lbPort := freePort(t)
	svc := lbService(w.ns, app, haproxyClass, int32(lbPort), int32(w.port))
	// The drain timeout outlasts the test: a drained server stays in drain.
	svc.Annotations = map[string]string{model.AnnotationHealthCheckInterval: "300ms", model.AnnotationDrainTimeout: "5m"}
	if err := w.c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	m := newMetrics(t)
	w.prov = haproxyFor(t, w.dir, m)
	w.reads = &readsSeen{Provider: w.prov}
	ctrl := startController(t, cfg, w.prov, m, controllerOptions{sync: service.SyncIncremental, drainProvider: w.reads})
	t.Cleanup(func() { ctrl.stop(t) })
	host, portText, _ := net.SplitHostPort(strings.TrimPrefix(strings.TrimSuffix(ctrl.drainURL, drain.Path), "http://"))
	dport, _ := strconv.Atoi(portText)

	var eps []endpoint
	for i, n := range names {
		name := app + "-" + n
		w.names = append(w.names, name)
		w.ips[name] = fmt.Sprintf("198.18.%d.%d", subnet, i+1)
		w.servers[name] = fmt.Sprintf("127.18.%d.%d:%d", subnet, i+1, w.port)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name, Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "app",
				Ports: []corev1.ContainerPort{{ContainerPort: int32(w.port)}}}}},
		}
		if res := webhook.Mutate(pod, w.ns, []*corev1.Service{svc}, webhook.Drain{Host: host, Port: int32(dport)}, webhook.GenerateName); len(res.Hooked) != 1 {
			t.Fatalf("webhook mutation: %+v", res)
		}
		startBackend(t, name, w.servers[name])
		if err := w.c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: w.ips[name], PodIPs: []corev1.PodIP{{IP: w.ips[name]}},
			Conditions: []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}}
		if err := w.c.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		w.pods[name] = pod
		eps = append(eps, endpoint{ip: w.ips[name], pod: name})
	}
	setSlice(t, w.c, w.ns, app, int32(w.port), eps...)
	eventually(t, 30*time.Second, "every gate", func() (bool, string) {
		for _, n := range w.names {
			if !gateTrue(t, w.c, w.ns, n) {
				return false, fmt.Sprint(readHAProxy(t, w.dir))
			}
		}
		return true, ""
	})
	w.slice(t)
	w.lbAddr = net.JoinHostPort(awaitIngress(t, w.c, w.ns, app), strconv.Itoa(lbPort))
	w.lbURL = "http://" + w.lbAddr + "/"
	eventually(t, 20*time.Second, "every pod reached", func() (bool, string) {
		seen := map[string]bool{}
		for i := 0; i < 4*len(names); i++ {
			name, _ := get(w.lbURL)
			seen[strings.TrimSpace(name)] = true
		}
		return len(seen) == len(names), fmt.Sprint(seen)
	})
	return w
}

// slice publishes every pod ready but those terminating (serving still).
func (w *stallWorld) slice(t *testing.T, terminating ...string) {
	t.Helper()
	var eps []endpoint
	for _, n := range w.names {
		if slices.Contains(terminating, n) {
			eps = append(eps, endpoint{ip: w.ips[n], pod: n, serving: true, terminating: true})
		} else {
			eps = append(eps, readyEndpoint(w.ips[n]))
		}
	}
	setSlice(t, w.c, w.ns, w.app, int32(w.port), eps...)
}

// status is pod name's server as the admin socket shows it (DRAIN, UP, …).
func (w *stallWorld) status(t *testing.T, name string) string {
	return readHAProxy(t, w.dir)[w.servers[name]].status
}

type stallAnswer struct {
	code   int
	result string
	at     time.Time
	err    error
}

// preStopCall makes the pod's preStop httpGet as a kubelet would, until ctx
// ends. Unlike kubeletPreStop it reports its error instead of failing the
// test: a call still held when the test fails ends after it.
func preStopCall(ctx context.Context, pod *corev1.Pod) stallAnswer {
	h := pod.Spec.Containers[0].Lifecycle.PreStop.HTTPGet
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(h.Host, h.Port.String()), Path: h.Path}
	if path, query, ok := strings.Cut(h.Path, "?"); ok {
		u.Path, u.RawQuery = path, query
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return stallAnswer{err: err, at: time.Now()}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return stallAnswer{err: err, at: time.Now()}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return stallAnswer{code: resp.StatusCode, result: resp.Header.Get(drain.ResultHeader), at: time.Now()}
}

// deleteAndCall deletes pod name with a long grace period (the gate's bound
// must not be what answers) and makes its preStop call; stopWatch returns
// the last instant HAProxy was seen sending the pod new connections.
func (w *stallWorld) deleteAndCall(t *testing.T, name string) (answered <-chan stallAnswer, stopWatch func() time.Time) {
	t.Helper()
	ctx := context.Background()
	pod := w.pods[name]
	if err := w.c.Delete(ctx, pod, client.GracePeriodSeconds(120)); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	stopWatch = watchPresent(t, func() bool {
		st, ok := readHAProxy(t, w.dir)[w.servers[name]]
		return ok && st.status != "DRAIN" && st.status != "MAINT"
	})
	ch := make(chan stallAnswer, 1)
	callCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		ch <- preStopCall(callCtx, pod)
	}()
	return ch, stopWatch
}

// drainedAnswer fails the test unless the call answered "drained" after the
// last instant HAProxy was seen sending the pod new connections.
func drainedAnswer(t *testing.T, name string, answered <-chan stallAnswer, stopWatch func() time.Time) {
	t.Helper()
	var a stallAnswer
	select {
	case a = <-answered:
	case <-time.After(90 * time.Second):
		t.Fatalf("the drain call of %s did not answer", name)
	}
	if a.err != nil || a.code != http.StatusOK || a.result != "drained" {
		t.Fatalf("the drain call of %s answered %d %q (%v), want 200 drained", name, a.code, a.result, a.err)
	}
	if seen := stopWatch(); seen.After(a.at) {
		t.Fatalf("the drain call of %s answered at %s, but HAProxy still sent it new connections at %s", name, a.at.Format(time.StampMicro), seen.Format(time.StampMicro))
	}
}

// notSent fails the test when the serving worker may send pod name new
// connections: its server must be in drain, in maintenance or gone (the
// controller removes a drained server at zero connections). The first pod,
// which stays, must be in the reading, so that a failed read is no pass.
func (w *stallWorld) notSent(t *testing.T, name string) {
	t.Helper()
	all := readHAProxy(t, w.dir)
	if _, ok := all[w.servers[w.names[0]]]; !ok {
		t.Fatalf("HAProxy does not show %s's server: %v", w.names[0], all)
	}
	if st, ok := all[w.servers[name]]; ok && st.status != "DRAIN" && st.status != "MAINT" {
		t.Fatalf("HAProxy shows %s's server %q, want DRAIN, MAINT or gone (all: %v)", name, st.status, all)
	}
}

// longTo opens a long-lived connection through the load balancer that
// lands on pod name: it keeps the pod's server draining (not removed) once
// the pod is drained.
func (w *stallWorld) longTo(t *testing.T, name string) *longConn {
	t.Helper()
	for i := 0; i < 40; i++ {
		lc, err := dialLong(w.lbAddr)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := lc.roundTrip(); err == nil && got == name {
			t.Cleanup(func() { lc.conn.Close() })
			return lc
		}
		lc.conn.Close()
	}
	t.Fatalf("no connection landed on %s", name)
	return nil
}

// onlyTo fails the test unless n new connections all reach pod want.
func (w *stallWorld) onlyTo(t *testing.T, n int, want string) {
	t.Helper()
	for i := 0; i < n; i++ {
		if name, err := get(w.lbURL); err != nil || strings.TrimSpace(name) != want {
			t.Fatalf("new connection went to %q (%v), want %s", name, err, want)
		}
	}
}

// stopMaster SIGSTOPs the HAProxy master and returns it and the function
// that resumes it; the cleanup resumes it too, also when the test fails, so
// that HAProxy can be stopped.
func (w *stallWorld) stopMaster(t *testing.T) (master int, workers []int, resume func()) {
	t.Helper()
	master, workers, _, err := w.prov.Procs(context.Background())
	if err != nil || len(workers) != 1 {
		t.Fatalf("show proc: workers %v, %v", workers, err)
	}
	resume = func() {
		if err := syscall.Kill(master, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Errorf("SIGCONT master %d: %v", master, err)
		}
	}
	t.Cleanup(resume)
	if err := syscall.Kill(master, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	return master, workers, resume
}

// queueReload sends `reload` to the (stopped) master's socket; the returned
// channel gets the outcome once the master has run it and closed the
// connection.
func queueReload(t *testing.T, dir string) <-chan error {
	t.Helper()
	conn, err := net.Dial("unix", filepath.Join(dir, "master.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, "reload\n"); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Minute))
		_, err := io.ReadAll(conn)
		done <- err
	}()
	return done
}

// adminSocketAnsweredBy reports whether `show info` on the admin socket is
// answered by worker pid.
func adminSocketAnsweredBy(dir string, pid int) bool {
	conn, err := net.DialTimeout("unix", filepath.Join(dir, "admin.sock"), 2*time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(conn, "show info\n"); err != nil {
		return false
	}
	out, _ := io.ReadAll(conn)
	return slices.Contains(strings.Split(string(out), "\n"), fmt.Sprintf("Pid: %d", pid))
}
