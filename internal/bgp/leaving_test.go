package bgp

import (
	"context"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"zerodrop.dev/zerodrop/internal/controlplane"
)

func TestNodeLeaving(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		desc     string
		node     corev1.Node
		onCordon bool
		want     bool
	}{
		{desc: "plain node", want: false},
		{desc: "exclusion label, empty value", node: corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{ExcludeLabel: ""}}}, want: true},
		{desc: "another label", node: corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"role": "lb"}}}, want: false},
		{desc: "autoscaler taint", node: corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: AutoscalerTaint, Effect: corev1.TaintEffectNoSchedule}}}}, want: true},
		{desc: "another taint", node: corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}}}, want: false},
		{desc: "being deleted", node: corev1.Node{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}, want: true},
		{desc: "cordoned, cordon not counted (default)", node: corev1.Node{Spec: corev1.NodeSpec{Unschedulable: true}}, want: false},
		{desc: "cordoned, WithdrawOnCordon", node: corev1.Node{Spec: corev1.NodeSpec{Unschedulable: true}}, onCordon: true, want: true},
	} {
		if got, why := NodeLeaving(&tc.node, tc.onCordon); got != tc.want {
			t.Errorf("%s: leaving %t (%q), want %t", tc.desc, got, why, tc.want)
		}
	}
}

// TestNodeWatcher runs the watcher against a real kube-apiserver: it
// follows its own Node only (another node's label changes nothing), turns
// leaving on and off as the Node's label, taint and deletion say, and keeps
// its last state, leaving or not, while the API server is down.
func TestNodeWatcher(t *testing.T) {
	env := controlplane.StartEnv(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	node := func(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := cs.CoreV1().Nodes().Create(ctx, node(n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := NewNodeWatcher(NodeWatcherConfig{Client: cs, NodeName: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		observed []string
	)
	w.observed = func(n *corev1.Node) {
		mu.Lock()
		observed = append(observed, n.Name+"/"+n.Labels["seen"])
		mu.Unlock()
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(runCtx) }()
	defer func() { stop(); <-done }()
	select {
	case <-w.Synced():
	case <-ctx.Done():
		t.Fatal("the watcher never read the Node")
	}
	wait := func(desc string, want bool) {
		t.Helper()
		for w.Leaving() != want {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: leaving stays %t", desc, !want)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	edit := func(name string, f func(*corev1.Node)) {
		t.Helper()
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f(n)
		if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if w.Leaving() {
		t.Fatal("a plain node is leaving")
	}
	// Another node's exclusion, then a change of this node's: once the
	// watcher has seen the second, it has been given no other node and is
	// not leaving.
	edit("node-b", func(n *corev1.Node) { n.Labels = map[string]string{ExcludeLabel: "true"} })
	edit("node-a", func(n *corev1.Node) { n.Labels = map[string]string{"seen": "1"} })
	for {
		mu.Lock()
		l := slices.Clone(observed)
		mu.Unlock()
		if slices.Contains(l, "node-a/1") {
			if i := slices.IndexFunc(l, func(s string) bool { return strings.HasPrefix(s, "node-b") }); i >= 0 || w.Leaving() {
				t.Fatalf("the watcher was given %v, leaving %t", l, w.Leaving())
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the watcher never saw node-a's label: %v", l)
		case <-time.After(10 * time.Millisecond):
		}
	}
	edit("node-a", func(n *corev1.Node) { n.Labels[ExcludeLabel] = "" })
	wait("exclusion label", true)
	edit("node-a", func(n *corev1.Node) { delete(n.Labels, ExcludeLabel) })
	wait("label removed", false)
	edit("node-a", func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: AutoscalerTaint, Effect: corev1.TaintEffectNoSchedule}}
	})
	wait("autoscaler taint", true)
	edit("node-a", func(n *corev1.Node) { n.Spec.Taints = nil })
	wait("taint removed", false)
	if err := cs.CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("deleted", true)
	if _, err := cs.CoreV1().Nodes().Create(ctx, node("node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("created again", false)

	// The API server dies: the watcher's watch breaks and its retries are
	// refused (the reflector retries a refused watch quietly, every 0.8 s
	// and more), and the node is still not leaving.
	pid, err := controlplane.APIServerPID(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err == nil {
		t.Fatal("the API server still answers")
	}
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if w.Leaving() {
			t.Fatal("the API server's outage turned leaving on")
		}
	}
}
