package dataplane

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestReplicasThatCount, on the real apiserver: a data-plane pod counts while
// its HAProxy can receive traffic — running with an address, terminating
// included — and stops counting when it has no address yet, has finished,
// or its node's Lease has expired (then with one Warning Event): no renewal
// seen for a lease duration on the controller's clock, so a Lease first
// seen counts, however old its renewTime (TestLeaseJudgedOnControllerClock).
func TestReplicasThatCount(t *testing.T) {
	cfg := controlplane.Start(t)
	c := testutil.Client(t, cfg)
	ctx := context.Background()
	const ns = "zerodrop-system"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	lease(t, c, "node-fresh", now.Add(-5*time.Second), 40)
	lease(t, c, "node-lost", now.Add(-time.Minute), 40)
	dpPod(t, c, ns, "dp-running", "node-fresh", "10.1.0.1", corev1.PodRunning)
	dpPod(t, c, ns, "dp-no-address", "node-fresh", "", corev1.PodPending)
	dpPod(t, c, ns, "dp-failed", "node-fresh", "10.1.0.3", corev1.PodFailed)
	dpPod(t, c, ns, "dp-node-lost", "node-lost", "10.1.0.4", corev1.PodRunning)
	dpPod(t, c, ns, "dp-no-lease", "node-unknown", "10.1.0.5", corev1.PodRunning)
	term := dpPod(t, c, ns, "dp-terminating", "node-fresh", "10.1.0.6", corev1.PodRunning)
	if err := c.Delete(ctx, term); err != nil {
		t.Fatal(err)
	}
	// Another app's pod in the namespace is not a replica.
	other := dpPod(t, c, ns, "controller", "node-fresh", "10.1.0.7", corev1.PodRunning)
	other.Labels = map[string]string{"app": "controller"}
	if err := c.Update(ctx, other); err != nil {
		t.Fatal(err)
	}

	rec := events.NewFakeRecorder(10)
	d := &Discovery{Reader: c, Namespace: ns, Selector: labels.SelectorFromSet(labels.Set{"app": "dataplane"}), Port: 9100,
		Recorder: rec, Now: func() time.Time { return now }, TLS: func(uid string) *tls.Config { return &tls.Config{ServerName: uid} }}
	for round := 0; round < 3; round++ {
		want := "dp-no-lease=https://10.1.0.5:9100 dp-running=https://10.1.0.1:9100 dp-terminating=https://10.1.0.6:9100"
		if round == 0 {
			// First sight of node-lost's Lease: it counts until a lease
			// duration passes on this clock without a renewal.
			want = "dp-no-lease=https://10.1.0.5:9100 dp-node-lost=https://10.1.0.4:9100 dp-running=https://10.1.0.1:9100 dp-terminating=https://10.1.0.6:9100"
		} else {
			// node-fresh's kubelet renews; node-lost's does not.
			now = now.Add(45 * time.Second)
			var l coordinationv1.Lease
			if err := c.Get(ctx, client.ObjectKey{Namespace: NodeLeaseNamespace, Name: "node-fresh"}, &l); err != nil {
				t.Fatal(err)
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: now}
			if err := c.Update(ctx, &l); err != nil {
				t.Fatal(err)
			}
		}
		rs, err := d.Replicas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range rs {
			rem := r.Provider.(*Remote)
			names = append(names, r.Name+"="+rem.BaseURL)
			// A terminating replica still counts (it holds connections)
			// and says so: it takes no new connection (the readiness
			// gate does not ask it, lbtarget.Replica.Terminating).
			if r.Terminating != (r.Name == "dp-terminating") {
				t.Errorf("replica %s: Terminating %v", r.Name, r.Terminating)
			}
			// Each replica is read with the TLS configuration that
			// accepts that replica's pod only.
			var pod corev1.Pod
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: r.Name}, &pod); err != nil {
				t.Fatal(err)
			}
			if tc := rem.Client.Transport.(*http.Transport).TLSClientConfig; tc == nil || tc.ServerName != string(pod.UID) {
				t.Errorf("replica %s read with TLS config %+v, want the one for its pod UID %s", r.Name, tc, pod.UID)
			}
		}
		if got := strings.Join(names, " "); got != want {
			t.Errorf("round %d: replicas %s, want %s", round, got, want)
		}
	}
	close(rec.Events)
	var evs []string
	for e := range rec.Events {
		evs = append(evs, e)
	}
	if len(evs) != 1 || !strings.Contains(evs[0], ReasonReplicaNotCounted) || !strings.Contains(evs[0], "node-lost's Lease expired") {
		t.Errorf("events %q, want one %s naming node-lost's expired Lease", evs, ReasonReplicaNotCounted)
	}
}

func lease(t *testing.T, c client.Client, node string, renewed time.Time, seconds int32) {
	t.Helper()
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: NodeLeaseNamespace}}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: NodeLeaseNamespace, Name: node},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To(seconds),
			RenewTime: &metav1.MicroTime{Time: renewed}}}
	if err := c.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
}

func dpPod(t *testing.T, c client.Client, ns, name, node, ip string, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "dataplane"},
		Finalizers: []string{"test.zerodrop.dev/keep"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "haproxy", Image: "dp"}}}}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: phase, PodIP: ip}
	if ip != "" {
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	if err := c.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLeaseJudgedOnControllerClock: a node's Lease is judged by when this
// controller saw it renewed, on its own clock, never by its renewTime (the
// node's clock wrote it). A node 40 s behind that keeps renewing counts; a
// node ahead or behind that stops renewing stops counting once a full lease
// duration has passed on the controller's clock without a renewal seen. A
// restarted controller has seen nothing yet: it counts every node until it
// has watched a full lease duration go by without a renewal. Reads go
// through a fake client: this is the judgement only (TestReplicasThatCount
// has the counting rules on the real apiserver).
func TestLeaseJudgedOnControllerClock(t *testing.T) {
	ctx := context.Background()
	const ns, duration = "zerodrop-system", 40
	clock := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	// Each node's clock differs from the controller's by its skew.
	skew := map[string]time.Duration{"node-behind": -40 * time.Second, "node-stopped": -40 * time.Second,
		"node-ahead": 10 * time.Minute}
	var objs []client.Object
	for _, node := range []string{"node-behind", "node-stopped", "node-ahead"} {
		objs = append(objs, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: NodeLeaseNamespace, Name: node},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](duration),
				RenewTime: &metav1.MicroTime{Time: clock.Add(skew[node])}}})
		name := "dp-" + strings.TrimPrefix(node, "node-")
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(name),
			Labels: map[string]string{"app": "dataplane"}},
			Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "haproxy", Image: "dp"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.1"}})
	}
	c := fake.NewClientBuilder().WithObjects(objs...).Build()
	// renew is the node's kubelet renewing its Lease, at its own clock.
	renew := func(node string) {
		t.Helper()
		var l coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: NodeLeaseNamespace, Name: node}, &l); err != nil {
			t.Fatal(err)
		}
		l.Spec.RenewTime = &metav1.MicroTime{Time: clock.Add(skew[node])}
		if err := c.Update(ctx, &l); err != nil {
			t.Fatal(err)
		}
	}
	discovery := func(rec events.EventRecorder) *Discovery {
		return &Discovery{Reader: c, Namespace: ns, Selector: labels.SelectorFromSet(labels.Set{"app": "dataplane"}), Port: 9100,
			Recorder: rec, Now: func() time.Time { return clock }, TLS: func(uid string) *tls.Config { return &tls.Config{ServerName: uid} }}
	}
	counted := func(d *Discovery) map[string]bool {
		t.Helper()
		rs, err := d.Replicas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, r := range rs {
			out[r.Name] = true
		}
		return out
	}

	rec := events.NewFakeRecorder(10)
	d := discovery(rec)
	// Every 10 s of the controller's clock (the kubelet's pace for a 40 s
	// Lease) node-behind renews; node-stopped and node-ahead renew at 0 s
	// and 10 s, then no more. The replicas are read 5 s after each renewal.
	start := clock
	for i := 0; i < 12; i++ {
		clock = start.Add(time.Duration(i) * 10 * time.Second)
		renew("node-behind")
		if i < 2 {
			renew("node-stopped")
			renew("node-ahead")
		}
		clock = clock.Add(5 * time.Second)
		got := counted(d)
		at := clock.Sub(start)
		if !got["dp-behind"] {
			t.Errorf("at %s: dp-behind not counted, although its node renews its Lease every 10 s (its clock is 40 s behind)", at)
		}
		// Last renewal at 10 s, seen at 15 s: counted up to 55 s; the
		// reads at 45 s and before are well within, 75 s and after well
		// past.
		since := clock.Sub(start.Add(time.Duration(min(i, 1)) * 10 * time.Second))
		for _, name := range []string{"dp-stopped", "dp-ahead"} {
			switch {
			case i <= 4 && !got[name]:
				t.Errorf("at %s: %s not counted, although its node renewed its Lease %s ago on the controller's clock", at, name, since)
			case i >= 7 && got[name]:
				t.Errorf("at %s: %s still counted, although its node has not renewed its Lease for %s on the controller's clock (lease duration %ds)", at, name, since, duration)
			}
		}
	}
	close(rec.Events)
	var evs []string
	for e := range rec.Events {
		evs = append(evs, e)
	}
	if len(evs) != 2 || !strings.Contains(strings.Join(evs, "\n"), "node-stopped's Lease expired") || !strings.Contains(strings.Join(evs, "\n"), "node-ahead's Lease expired") {
		t.Errorf("events %q, want one %s for node-stopped and one for node-ahead", evs, ReasonReplicaNotCounted)
	}

	// A restarted controller has seen no renewal yet: node-stopped's Lease,
	// not renewed for 105 s, counts until this process has watched a full
	// lease duration go by without a renewal — the gates wait, they never
	// answer early.
	restarted := discovery(nil)
	restartedAt := clock
	for _, after := range []time.Duration{0, 20 * time.Second, 35 * time.Second, 60 * time.Second} {
		clock = restartedAt.Add(after)
		renew("node-behind")
		got := counted(restarted)
		if !got["dp-behind"] {
			t.Errorf("restarted, after %s: dp-behind not counted, although its node renews its Lease", after)
		}
		if lost := after > duration*time.Second; got["dp-stopped"] == lost {
			t.Errorf("restarted, after %s: dp-stopped counted=%v, want %v (a node is judged lost only after a full lease duration without a renewal seen by this process)", after, got["dp-stopped"], !lost)
		}
	}
}
