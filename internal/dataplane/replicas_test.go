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
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/testenv"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestReplicasThatCount, on the real apiserver: a data-plane pod counts while
// its HAProxy can receive traffic — running with an address, terminating
// included — and stops counting when it has no address yet, has finished,
// or its node's Lease has expired (then with one Warning Event).
func TestReplicasThatCount(t *testing.T) {
	cfg := testenv.Start(t)
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
	for round := 0; round < 2; round++ {
		rs, err := d.Replicas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range rs {
			rem := r.Provider.(*Remote)
			names = append(names, r.Name+"="+rem.BaseURL)
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
		want := "dp-no-lease=https://10.1.0.5:9100 dp-running=https://10.1.0.1:9100 dp-terminating=https://10.1.0.6:9100"
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
