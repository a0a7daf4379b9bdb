package controller

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/dataplane"
	"zerodrop.dev/zerodrop/internal/dataplane/stateauth"
	"zerodrop.dev/zerodrop/internal/probe"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestTwoReplicasOnOneNode (issue 50): two data-plane pods on one node —
// a DaemonSet surge with host networking — share the node's address. The
// first replica's state endpoint binds the state port; the second finds it
// in use and binds the alternate, instead of crash-looping. The control
// role counts both and reads each at the port whose certificate names that
// pod: the Service turns Ready only when both serve it, and a Discovery
// with the control role's real CA reads the old pod at the state port and
// the new one at the alternate. A pod whose replica answers at neither
// port fails its read, naming both; with one replica's process stopped,
// its read fails — the other pod, answering on the other port, is never
// read in its place. Its process started again takes the port now free,
// and the control role finds it there after one failed read.
func TestTwoReplicasOnOneNode(t *testing.T) {
	restCfg := controlplane.Start(t)
	c := testutil.Client(t, restCfg)
	ctx := context.Background()
	const ns, name, podIP, nodeIP = "default", "surge", "198.18.66.1", "127.0.95.1"
	statePort, altPort := testutil.FreePort(t), testutil.FreePort(t)
	dirs := map[string]string{"dp-old": t.TempDir(), "dp-new": t.TempDir()}
	for _, d := range dirs {
		t.Cleanup(func() { testutil.StopHAProxy(t, d) })
	}
	replicaPodOn(t, restCfg, c, "dp-old", "node-a", nodeIP)
	replicaPodOn(t, restCfg, c, "dp-new", "node-a", nodeIP)

	cfg := baseConfig(restCfg)
	cfg.DataPlane = RoleConfig{Role: "control", Namespace: "kube-system", Selector: dataPlaneSelector,
		StatePort: statePort, ReplicaAlternatePort: altPort}
	runProcess(t, cfg)

	stateAddr := net.JoinHostPort(nodeIP, strconv.Itoa(statePort))
	metricsAddr := net.JoinHostPort(nodeIP, strconv.Itoa(testutil.FreePort(t)))
	socket := func(pod string) string { return filepath.Join(dirs[pod], "probe.sock") }
	uids := map[string]string{}
	replica := func(pod string) *process {
		cfg := dataPlaneConfig(t, restCfg, c, pod, dirs[pod], stateAddr)
		cfg.DataPlane.StateAlternatePort = altPort
		// As the chart runs it: probes on a socket in the pod's volume,
		// metrics on the node's address, one port for both pods.
		cfg.ProbeSocket, cfg.MetricsAddr = socket(pod), metricsAddr
		uids[pod] = cfg.DataPlane.PodUID
		return runProcess(t, cfg)
	}
	// scrape is the metrics port's answer to a scrape meant for pod.
	scrape := func(pod string) int {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + metricsAddr + "/metrics?" + PodUIDParam + "=" + uids[pod])
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// probeExit is `zerodrop probe --socket … /readyz`'s exit code for pod.
	probeExit := func(pod string) (int, string) {
		var out bytes.Buffer
		code := probe.Run(ctx, []string{"--socket", socket(pod), "/readyz"}, &out, &out)
		return code, out.String()
	}
	listening := func(port int) {
		t.Helper()
		addr := net.JoinHostPort(nodeIP, strconv.Itoa(port))
		testutil.Eventually(t, 60*time.Second, addr+" to listen", func() (bool, string) {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return false, err.Error()
			}
			conn.Close()
			return true, ""
		})
	}
	dp := map[string]*process{"dp-old": replica("dp-old")}
	listening(statePort)
	dp["dp-new"] = replica("dp-new")
	listening(altPort)

	if err := c.Create(ctx, testutil.LBService(ns, name, "zerodrop.dev/haproxy", 80, 8080)); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, testutil.Slice(ns, name, 8080, podIP)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 90*time.Second, "the Service Ready: both replicas of the node serve it", func() (bool, string) {
		var svc corev1.Service
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(svc.Status.Conditions, service.ConditionReady)
		return ready != nil && ready.Status == metav1.ConditionTrue, fmt.Sprintf("ready=%+v", ready)
	})
	for pod, p := range dp {
		if n := counterSum(t, p.reg, "zerodrop_reconcile_total"); n == 0 {
			t.Errorf("%s: its process never reconciled", pod)
		}
		// Started, not crash-looping on the ports the other pod holds,
		// and ready through its own probe socket.
		select {
		case err := <-p.done:
			t.Fatalf("%s: its process exited: %v", pod, err)
		default:
		}
		if code, out := probeExit(pod); code != 0 {
			t.Errorf("%s: exec probe exit %d (%s), want 0", pod, code, out)
		}
	}
	// The old pod holds the metrics port; a scrape meant for the new pod
	// is refused there, not answered with the old one's metrics.
	if o, n := scrape("dp-old"), scrape("dp-new"); o != http.StatusOK || n != http.StatusConflict {
		t.Errorf("scrapes of the metrics port: for dp-old %d, for dp-new %d; want 200 and 409", o, n)
	}

	// The control role's view, with its real CA: each pod is read at its
	// own port.
	auth := &stateauth.Authority{Client: c, Namespace: "kube-system", Log: testr.New(t)}
	if err := auth.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	sel, err := labels.Parse(dataPlaneSelector)
	if err != nil {
		t.Fatal(err)
	}
	d := &dataplane.Discovery{Reader: c, Namespace: "kube-system", Selector: sel, Port: statePort,
		AlternatePorts: []int{altPort}, TLS: auth.TLSConfig}
	key := ns + "/" + name
	// reads is each counted replica's read of the Service: the URL it was
	// read at, or its error.
	reads := func() map[string]string {
		t.Helper()
		rs, err := d.Replicas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, r := range rs {
			lb, err := r.Provider.Observe(ctx, key)
			switch {
			case err != nil:
				out[r.Name] = "error: " + err.Error()
			case lb == nil:
				out[r.Name] = "no load balancer"
			default:
				out[r.Name] = r.Provider.(*dataplane.Remote).StateURL()
			}
		}
		return out
	}
	at := func(port int) string { return "https://" + net.JoinHostPort(nodeIP, strconv.Itoa(port)) }
	got := reads()
	if got["dp-old"] != at(statePort) || got["dp-new"] != at(altPort) || len(got) != 2 {
		t.Fatalf("reads %v; want dp-old at %s and dp-new at %s", got, at(statePort), at(altPort))
	}

	// A third pod of the node whose replica serves at neither port.
	replicaPodOn(t, restCfg, c, "dp-lost", "node-a", nodeIP)
	got = reads()
	if e := got["dp-lost"]; !strings.HasPrefix(e, "error: ") || !strings.Contains(e, stateAddr) ||
		!strings.Contains(e, net.JoinHostPort(nodeIP, strconv.Itoa(altPort))) {
		t.Errorf("dp-lost, whose certificate is at neither port: %q; want a failed read naming both ports", e)
	}
	if got["dp-old"] != at(statePort) || got["dp-new"] != at(altPort) {
		t.Errorf("reads %v with dp-lost counted; dp-old and dp-new still at their own ports", got)
	}
	if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "dp-lost"}}); err != nil {
		t.Fatal(err)
	}

	// The old pod's process stops (its pod, and HAProxy, stay): its read
	// fails; the new pod, answering on the other port, is not read for it.
	// Its probe fails (nothing answers for it), and the new pod takes the
	// metrics port.
	dp["dp-old"].stop(t)
	if code, out := probeExit("dp-old"); code != 1 {
		t.Errorf("dp-old's exec probe with its process stopped: exit %d (%s), want 1", code, out)
	}
	testutil.Eventually(t, 30*time.Second, "dp-new to take the metrics port", func() (bool, string) {
		o, n := scrape("dp-old"), scrape("dp-new")
		return o == http.StatusConflict && n == http.StatusOK, fmt.Sprintf("for dp-old %d, for dp-new %d", o, n)
	})
	for range 3 {
		got = reads()
		if !strings.HasPrefix(got["dp-old"], "error: ") {
			t.Fatalf("dp-old read with its process stopped: %q; want an error (the other pod's answer is not its)", got["dp-old"])
		}
		if got["dp-new"] != at(altPort) {
			t.Fatalf("dp-new: %q, want read at %s", got["dp-new"], at(altPort))
		}
	}

	// The new pod's process restarts and takes the state port, free now:
	// one read fails at the port known, the next finds the new one.
	dp["dp-new"].stop(t)
	dp["dp-new"] = replica("dp-new")
	listening(statePort)
	testutil.Eventually(t, 60*time.Second, "dp-new read at the state port", func() (bool, string) {
		got = reads()
		return got["dp-new"] == at(statePort), fmt.Sprintf("reads %v", got)
	})
	if !strings.HasPrefix(got["dp-old"], "error: ") {
		t.Errorf("dp-old read %q with its process stopped and dp-new on its port; want an error", got["dp-old"])
	}
}
