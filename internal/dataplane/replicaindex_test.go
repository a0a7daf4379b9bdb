package dataplane

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestReplicasFromTheIndex: with the index of data-plane pods on a real
// cache (Indexed, as the command runs it), the replicas are the pods the
// selector matches, and follow their labels: a pod relabelled out stops
// counting, one relabelled in starts; the namespace's other pods are never
// replicas.
func TestReplicasFromTheIndex(t *testing.T) {
	cfg := controlplane.Start(t)
	c := testutil.Client(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "zerodrop-system"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	dpPod(t, c, ns, "dp-a", "node-a", "10.1.0.1", corev1.PodRunning)
	dpPod(t, c, ns, "dp-b", "node-b", "10.1.0.2", corev1.PodRunning)
	for _, name := range []string{"app-1", "app-2", "app-3"} {
		p := dpPod(t, c, ns, name, "node-a", "10.2.0.1", corev1.PodRunning)
		p.Labels = map[string]string{"app": "web"}
		if err := c.Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	sel := labels.SelectorFromSet(labels.Set{"app": "dataplane"})
	ca, err := cache.New(cfg, cache.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := IndexReplicas(ctx, ca, sel); err != nil {
		t.Fatal(err)
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	d := &Discovery{Reader: ca, Indexed: true, Namespace: ns, Selector: sel, Port: 9100,
		TLS: func(uid string) *tls.Config { return &tls.Config{ServerName: uid} }}
	want := func(step, names string) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, step, func() (bool, string) {
			rs, err := d.Replicas(ctx)
			if err != nil {
				return false, err.Error()
			}
			var got []string
			for _, r := range rs {
				got = append(got, r.Name)
			}
			return strings.Join(got, " ") == names, "replicas " + strings.Join(got, " ") + ", want " + names
		})
	}
	want("at start", "dp-a dp-b")
	relabel := func(name, app string) {
		t.Helper()
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		p.Labels = map[string]string{"app": app}
		if err := c.Update(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	relabel("dp-a", "web")
	relabel("app-2", "dataplane")
	want("after relabelling", "app-2 dp-b")
}
