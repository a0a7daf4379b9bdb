package chart

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestPodWatchNodes: from samples of the data-plane pods, each node's
// replacement — a surge (the new pod Ready before the old one
// terminates: two pods, never without a ready pod) and an update without
// surge (the old pod gone before the new one starts: no two pods, a gap
// until the new one is Ready).
func TestPodWatchNodes(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	pod := func(uid, node string, ready, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: uid}, Spec: corev1.PodSpec{NodeName: node}}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: at(0)}
		}
		return p
	}
	w := &podWatch{pods: map[types.UID]*podLife{}}
	w.sample([]*corev1.Pod{pod("a-old", "a", true, false), pod("b-old", "b", true, false)}, at(0))
	old := w.uids()
	// Node a, surge: new pod at 10 s, Ready at 12 s, old terminating at
	// 13 s and gone at 15 s.
	w.sample([]*corev1.Pod{pod("a-old", "a", true, false), pod("a-new", "a", false, false), pod("b-old", "b", true, false)}, at(10))
	w.sample([]*corev1.Pod{pod("a-old", "a", true, false), pod("a-new", "a", true, false), pod("b-old", "b", true, false)}, at(12))
	w.sample([]*corev1.Pod{pod("a-old", "a", false, true), pod("a-new", "a", true, false), pod("b-old", "b", true, false)}, at(13))
	// Node b, no surge: old pod terminating at 20 s and gone at 21 s, new
	// pod at 22 s, Ready at 26 s.
	w.sample([]*corev1.Pod{pod("a-new", "a", true, false), pod("b-old", "b", true, false)}, at(15))
	w.sample([]*corev1.Pod{pod("a-new", "a", true, false), pod("b-old", "b", false, true)}, at(20))
	w.sample([]*corev1.Pod{pod("a-new", "a", true, false)}, at(21))
	w.sample([]*corev1.Pod{pod("a-new", "a", true, false), pod("b-new", "b", false, false)}, at(22))
	w.sample([]*corev1.Pod{pod("a-new", "a", true, false), pod("b-new", "b", true, false)}, at(26))
	got := w.nodes(old, t0, at(30))
	if len(got) != 2 {
		t.Fatalf("%d nodes, want 2: %+v", len(got), got)
	}
	a, b := got[0], got[1]
	if a.Node != "a" || a.NewPod != "a-new" || a.StartSeconds != 10 || a.EndSeconds != 15 || a.TwoPodsSeconds != 5 || a.NoReadyPodSeconds != 0 || a.OldDeletedSeconds != 13 {
		t.Errorf("surge: %+v, want start 10, end 15, two pods 5 s, no gap, old deleted at 13", a)
	}
	if b.Node != "b" || b.NewPod != "b-new" || b.StartSeconds != 20 || b.EndSeconds != 26 || b.TwoPodsSeconds != 0 || b.NoReadyPodSeconds != 6 || b.OldDeletedSeconds != 20 {
		t.Errorf("no surge: %+v, want start 20, end 26, no two pods, 6 s without a ready pod, old deleted at 20", b)
	}
	if a.OldDrainingAtEnd || b.OldDrainingAtEnd {
		t.Errorf("old pods gone, yet reported draining at the end: %+v %+v", a, b)
	}

	// An old pod still draining when the act ends (--data-plane-update-end
	// new-ready): its times run to the act's end.
	w = &podWatch{pods: map[types.UID]*podLife{}}
	w.sample([]*corev1.Pod{pod("c-old", "c", true, false)}, at(0))
	old = w.uids()
	w.sample([]*corev1.Pod{pod("c-old", "c", true, false), pod("c-new", "c", false, false)}, at(10))
	w.sample([]*corev1.Pod{pod("c-old", "c", true, false), pod("c-new", "c", true, false)}, at(12))
	w.sample([]*corev1.Pod{pod("c-old", "c", false, true), pod("c-new", "c", true, false)}, at(13))
	got = w.nodes(old, t0, at(30))
	if c := got[0]; !c.OldDrainingAtEnd || c.EndSeconds != 30 || c.TwoPodsSeconds != 20 || c.OldDeletedSeconds != 13 {
		t.Errorf("draining at the end: %+v, want it flagged, end 30, two pods 20 s, old deleted at 13", c)
	}
	if n := w.deleting(old); n != 1 {
		t.Errorf("%d old pods terminating, want 1", n)
	}
}

// TestDrainBound: the grace period bounds an old pod's drain, a shorter
// --haproxy-hard-stop-after in any container more so.
func TestDrainBound(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want time.Duration
	}{
		{"grace period", corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](60)}, 60 * time.Second},
		{"Kubernetes' default", corev1.PodSpec{}, 30 * time.Second},
		{"hard-stop-after shorter", corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](60),
			Containers: []corev1.Container{{Name: "controller", Args: []string{"--haproxy-hard-stop-after=10s"}}}}, 10 * time.Second},
		{"hard-stop-after longer", corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](60),
			Containers: []corev1.Container{{Name: "controller", Args: []string{"--haproxy-hard-stop-after=2m"}}}}, 60 * time.Second},
	} {
		got, _, err := drainBound(&tc.spec)
		if err != nil || got != tc.want {
			t.Errorf("%s: %s, %v; want %s", tc.name, got, err, tc.want)
		}
	}
}
