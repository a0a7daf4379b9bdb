package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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
	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/testenv"
	"zerodrop.dev/zerodrop/internal/webhook"
)

// readsSeen counts the drain endpoint's successful reads of the load
// balancer: the test stops the master only once the gate has looked at
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

// TestHAProxyGateMasterStopped is issue 18's "HAProxy master busy during
// drains" on the real apiserver and a real HAProxy. A pod is deleted and its
// preStop drain call made while HAProxy still sends it new connections; once
// the gate has read that, the HAProxy master is stopped (SIGSTOP) with a
// reload queued on its socket. The controller drains the pod's server at run
// time all the same (the worker's admin socket needs no master), while the
// gate cannot read HAProxy (Backends asks the master for the old workers'
// connections) and keeps looking. When the master resumes, the queued reload
// replaces the worker; the call answers "drained", after the last instant
// HAProxy was seen sending the pod new connections, and the new worker has
// the server in drain: new connections reach only the other pod.
func TestHAProxyGateMasterStopped(t *testing.T) {
	cfg := testenv.Start(t)
	c := newClient(t, cfg)
	ctx := context.Background()
	dir := t.TempDir()
	const ns, app = "default", "stall"
	port, lbPort := freePort(t), freePort(t)
	svc := lbService(ns, app, haproxyClass, int32(lbPort), int32(port))
	// The drain timeout outlasts the test: the server stays in drain.
	svc.Annotations = map[string]string{model.AnnotationHealthCheckInterval: "300ms", model.AnnotationDrainTimeout: "5m"}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	m := newMetrics(t)
	prov := haproxyFor(t, dir, m)
	reads := &readsSeen{Provider: prov}
	ctrl := startController(t, cfg, prov, m, controllerOptions{sync: service.SyncIncremental, drainProvider: reads})
	defer ctrl.stop(t)
	drainHost, drainPort, _ := net.SplitHostPort(strings.TrimPrefix(strings.TrimSuffix(ctrl.drainURL, drain.Path), "http://"))
	dport, _ := strconv.Atoi(drainPort)

	gatedPod(t, c, ns, "stall-a", app, "198.18.7.1")
	startBackend(t, "stall-a", fmt.Sprintf("127.18.7.1:%d", port))
	podB := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stall-b", Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "app",
			Ports: []corev1.ContainerPort{{ContainerPort: int32(port)}}}}},
	}
	if res := webhook.Mutate(podB, ns, []*corev1.Service{svc}, webhook.Drain{Host: drainHost, Port: int32(dport)}, webhook.GenerateName); len(res.Hooked) != 1 {
		t.Fatalf("webhook mutation: %+v", res)
	}
	serverB := fmt.Sprintf("127.18.7.2:%d", port)
	startBackend(t, "stall-b", serverB)
	if err := c.Create(ctx, podB); err != nil {
		t.Fatal(err)
	}
	podB.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.18.7.2", PodIPs: []corev1.PodIP{{IP: "198.18.7.2"}},
		Conditions: []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}}
	if err := c.Status().Update(ctx, podB); err != nil {
		t.Fatal(err)
	}
	setSlice(t, c, ns, app, int32(port), endpoint{ip: "198.18.7.1", pod: "stall-a"}, endpoint{ip: "198.18.7.2", pod: "stall-b"})
	eventually(t, 30*time.Second, "both gates", func() (bool, string) {
		return gateTrue(t, c, ns, "stall-a") && gateTrue(t, c, ns, "stall-b"), fmt.Sprint(readHAProxy(t, dir))
	})
	setSlice(t, c, ns, app, int32(port), readyEndpoint("198.18.7.1"), readyEndpoint("198.18.7.2"))
	lbAddr := "http://" + net.JoinHostPort(ingressOf(t, c, ns, app), strconv.Itoa(lbPort)) + "/"
	eventually(t, 20*time.Second, "both pods reached", func() (bool, string) {
		seen := map[string]bool{}
		for i := 0; i < 8; i++ {
			name, _ := get(lbAddr)
			seen[strings.TrimSpace(name)] = true
		}
		return seen["stall-a"] && seen["stall-b"], fmt.Sprint(seen)
	})

	// A long grace period: the gate's bound must not be what answers.
	if err := c.Delete(ctx, podB, client.GracePeriodSeconds(120)); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(podB), podB); err != nil {
		t.Fatal(err)
	}
	stopWatch := watchPresent(t, func() bool {
		st, ok := readHAProxy(t, dir)[serverB]
		return ok && st.status != "DRAIN" && st.status != "MAINT"
	})
	type answer struct {
		code   int
		result string
		at     time.Time
	}
	answered := make(chan answer, 1)
	go func() {
		code, result, at := kubeletPreStop(t, podB)
		answered <- answer{code, result, at}
	}()
	eventually(t, 30*time.Second, "the gate to read HAProxy", func() (bool, string) {
		return reads.ok.Load() > 0, "no successful read yet"
	})

	master, w0, _, err := prov.Procs(ctx)
	if err != nil || len(w0) != 1 {
		t.Fatalf("show proc: workers %v, %v", w0, err)
	}
	resume := func() {
		if err := syscall.Kill(master, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Errorf("SIGCONT master %d: %v", master, err)
		}
	}
	t.Cleanup(resume) // also when the test fails: HAProxy must be stoppable
	if err := syscall.Kill(master, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	queued := queueReload(t, dir)

	setSlice(t, c, ns, app, int32(port), readyEndpoint("198.18.7.1"),
		endpoint{ip: "198.18.7.2", pod: "stall-b", serving: true, terminating: true})
	eventually(t, 60*time.Second, "HAProxy draining pod B with its master stopped", func() (bool, string) {
		st := readHAProxy(t, dir)[serverB]
		return st.status == "DRAIN", st.status
	})
	resume()
	select {
	case err := <-queued:
		if err != nil {
			t.Fatalf("the queued reload: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the queued reload never ran")
	}

	var a answer
	select {
	case a = <-answered:
	case <-time.After(90 * time.Second):
		t.Fatal("drain did not answer after the master resumed")
	}
	if a.code != http.StatusOK || a.result != "drained" {
		t.Fatalf("drain answered %d %q, want 200 drained", a.code, a.result)
	}
	if seen := stopWatch(); seen.After(a.at) {
		t.Fatalf("drain answered at %s, but HAProxy still sent pod B new connections at %s", a.at.Format(time.StampMicro), seen.Format(time.StampMicro))
	}
	// The worker that serves now is the one the queued reload started, and
	// it has pod B's server in drain.
	eventually(t, 30*time.Second, "the new worker serving", func() (bool, string) {
		_, w, _, err := prov.Procs(ctx)
		return err == nil && len(w) == 1 && !slices.Contains(w0, w[0]) && adminSocketAnsweredBy(dir, w[0]), fmt.Sprint(w, err)
	})
	if st := readHAProxy(t, dir)[serverB]; st.status != "DRAIN" {
		t.Fatalf("after the reload the serving worker shows pod B's server %+v, want DRAIN", st)
	}
	for i := 0; i < 10; i++ {
		if name, err := get(lbAddr); err != nil || strings.TrimSpace(name) != "stall-a" {
			t.Fatalf("new connection after the drain answer went to %q (%v), want stall-a", name, err)
		}
	}
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
