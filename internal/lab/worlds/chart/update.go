package chart

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// lb-update (issue 50) on the chart's install: the data-plane DaemonSet's
// pod template changed and every node's pod replaced by the real
// DaemonSet controller with the strategy the chart was installed with
// (Options.Update, haproxy.updateStrategy), while the lab watches each
// node's pods.

// strategyValues are the chart values of an update strategy ("": the
// chart's default), of a hard-stop-after and of a grace period (0: the
// chart's default).
func strategyValues(update string, hardStopAfter, gracePeriod time.Duration) []string {
	const p = "haproxy.updateStrategy.rollingUpdate."
	var out []string
	switch update {
	case report.UpdateSurge:
		out = []string{p + "maxSurge=1", p + "maxUnavailable=0"}
	case report.UpdateUnavailable:
		out = []string{p + "maxSurge=0", p + "maxUnavailable=1"}
	}
	if hardStopAfter > 0 {
		out = append(out, "haproxy.hardStopAfter="+hardStopAfter.String())
	}
	if gracePeriod > 0 {
		out = append(out, fmt.Sprintf("terminationGracePeriodSeconds=%d", int(gracePeriod/time.Second)))
	}
	return out
}

// UpdatePlan reads the installed DaemonSet: its update strategy, and the
// bound of an old pod's drain — its terminationGracePeriodSeconds, or a
// --haproxy-hard-stop-after (haproxy.hardStopAfter) in any container's
// arguments when shorter: the old HAProxy's last connection ends by then.
func (r *run) UpdatePlan(ctx context.Context) (report.UpdateFigures, time.Duration, error) {
	ds, err := r.w.Lab.CP.Client.AppsV1().DaemonSets(world.ControllerNamespace).Get(ctx, r.dataPlaneName(), metav1.GetOptions{})
	if err != nil {
		return report.UpdateFigures{}, 0, fmt.Errorf("read the data plane's DaemonSet: %w", err)
	}
	f := report.UpdateFigures{Strategy: "chart-default", MaxSurge: "0", MaxUnavailable: "1"}
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru != nil {
		if ru.MaxSurge != nil {
			f.MaxSurge = ru.MaxSurge.String()
		}
		if ru.MaxUnavailable != nil {
			f.MaxUnavailable = ru.MaxUnavailable.String()
		}
	}
	switch {
	case f.MaxSurge != "0" && f.MaxUnavailable == "0":
		f.Strategy = report.UpdateSurge
	case f.MaxSurge == "0" && f.MaxUnavailable != "0":
		f.Strategy = report.UpdateUnavailable
	}
	bound, from, err := drainBound(&ds.Spec.Template.Spec)
	if err != nil {
		return f, 0, err
	}
	f.DrainBoundSeconds, f.DrainBoundFrom = bound.Seconds(), from
	return f, bound, nil
}

// drainBound is the bound of an old data-plane pod's drain and where it
// comes from.
func drainBound(spec *corev1.PodSpec) (time.Duration, string, error) {
	bound, from := 30*time.Second, "terminationGracePeriodSeconds (Kubernetes' default)"
	if g := spec.TerminationGracePeriodSeconds; g != nil {
		bound, from = time.Duration(*g)*time.Second, "terminationGracePeriodSeconds"
	}
	for _, c := range spec.Containers {
		for _, a := range slices.Concat(c.Command, c.Args) {
			v, ok := strings.CutPrefix(a, "--haproxy-hard-stop-after=")
			if !ok {
				continue
			}
			d, err := time.ParseDuration(v)
			if err != nil {
				return 0, "", fmt.Errorf("container %s: %s: %w", c.Name, a, err)
			}
			if d > 0 && d < bound {
				bound, from = d, "haproxy.hardStopAfter ("+c.Name+" container's --haproxy-hard-stop-after)"
			}
		}
	}
	return bound, from, nil
}

// UpdateDataPlane changes the DaemonSet's pod template (updateDaemonSet:
// a new annotation, as `kubectl rollout restart` does) and returns once
// every pod is replaced, every replica routed and every old pod gone
// (within its grace period and a minute more), with each node's
// replacement, its times in seconds since since. With oldMayDrain it
// returns once every node's new pod is Ready and routed and every old pod
// terminating: old pods whose grace period outlasts the scenario drain
// past its end, their connections ending with the traffic.
func (r *run) UpdateDataPlane(ctx context.Context, mark func(string, ...any), since time.Time, oldMayDrain bool) ([]report.NodeUpdate, error) {
	w := &podWatch{pods: map[types.UID]*podLife{}}
	w.sample(r.pods(r.dataPlaneName()), time.Now())
	old := w.uids()
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for traffic.SleepCtx(sctx, 100*time.Millisecond) {
			w.sample(r.pods(r.dataPlaneName()), time.Now())
		}
	})
	defer func() { stop(); wg.Wait() }()
	act := world.Act{Mark: mark}
	if oldMayDrain {
		if _, err := r.patchDaemonSet(ctx, act); err != nil {
			return nil, err
		}
		if err := traffic.WaitFor(ctx, 2*time.Minute+time.Duration(r.w.N)*30*time.Second, "every new data-plane pod ready and routed, every old one terminating", func() (bool, string) {
			deleting, ready := w.deleting(old), w.readyNew(old)
			if deleting < len(old) || ready < r.w.N {
				return false, fmt.Sprintf("%d of %d old pods terminating, %d new ones ready", deleting, len(old), ready)
			}
			return r.Plane.Routed(r.w.N)
		}); err != nil {
			return nil, err
		}
		stop()
		wg.Wait()
		return w.nodes(old, since, time.Now()), nil
	}
	if err := r.updateDaemonSet(ctx, act, r.w.N); err != nil {
		return nil, err
	}
	mark("DaemonSet update done")
	// The DaemonSet's status may count a terminating old pod as ready (an
	// update without surge): its node's new pod is waited for here too.
	if err := traffic.WaitFor(ctx, 3*time.Minute, "every old data-plane pod gone and every new one ready", func() (bool, string) {
		left, ready := w.left(old), w.readyNew(old)
		return left == 0 && ready == r.w.N, fmt.Sprintf("%d old pods left, %d new ones ready", left, ready)
	}); err != nil {
		return nil, err
	}
	stop()
	wg.Wait()
	return w.nodes(old, since, time.Now()), nil
}

// podLife is what the lab saw of one data-plane pod: when it was first
// seen, first Ready, first terminating, and first missing.
type podLife struct {
	name, node                  string
	seen, ready, deleting, gone time.Time
}

// podWatch samples the run's data-plane pods.
type podWatch struct {
	mu   sync.Mutex
	pods map[types.UID]*podLife
}

func (w *podWatch) sample(pods []*corev1.Pod, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	present := map[types.UID]bool{}
	for _, p := range pods {
		present[p.UID] = true
		l := w.pods[p.UID]
		if l == nil {
			l = &podLife{name: p.Name, seen: now}
			w.pods[p.UID] = l
		}
		if l.node == "" {
			l.node = p.Spec.NodeName
		}
		if l.ready.IsZero() && podReady(p) {
			l.ready = now
		}
		if l.deleting.IsZero() && p.DeletionTimestamp != nil {
			l.deleting = now
		}
	}
	for uid, l := range w.pods {
		if !present[uid] && l.gone.IsZero() {
			l.gone = now
			if l.deleting.IsZero() {
				l.deleting = now
			}
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (w *podWatch) uids() []types.UID {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []types.UID
	for uid := range w.pods {
		out = append(out, uid)
	}
	return out
}

// left is how many of the pods old are still there.
func (w *podWatch) left(old []types.UID) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, uid := range old {
		if w.pods[uid].gone.IsZero() {
			n++
		}
	}
	return n
}

// deleting is how many of the pods old have begun terminating (or are gone).
func (w *podWatch) deleting(old []types.UID) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, uid := range old {
		if !w.pods[uid].deleting.IsZero() {
			n++
		}
	}
	return n
}

// readyNew is how many pods that are not of old have been seen Ready and
// are still there.
func (w *podWatch) readyNew(old []types.UID) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for uid, l := range w.pods {
		if !slices.Contains(old, uid) && !l.ready.IsZero() && l.gone.IsZero() {
			n++
		}
	}
	return n
}

// nodes is each node's replacement, from its old pod (of old) and the pod
// that came after it on the same node, in the order the nodes began. An
// old pod not gone by now is still draining: its times run to now.
func (w *podWatch) nodes(old []types.UID, since, now time.Time) []report.NodeUpdate {
	w.mu.Lock()
	defer w.mu.Unlock()
	sec := func(t time.Time) float64 { return t.Sub(since).Seconds() }
	var out []report.NodeUpdate
	for _, uid := range old {
		o := w.pods[uid]
		var n *podLife
		for nuid, l := range w.pods {
			if l.node == o.node && !slices.Contains(old, nuid) && (n == nil || l.seen.Before(n.seen)) {
				n = l
			}
		}
		u := report.NodeUpdate{Node: o.node, OldPod: o.name, OldDeletedSeconds: sec(o.deleting)}
		gone := o.gone
		if gone.IsZero() {
			gone, u.OldDrainingAtEnd = now, true
		}
		start, end := o.deleting, gone
		if n != nil {
			u.NewPod = n.name
			if n.seen.Before(start) {
				start = n.seen
			}
			if n.ready.After(end) {
				end = n.ready
			}
			u.TwoPodsSeconds = max(0, gone.Sub(n.seen).Seconds())
			u.NoReadyPodSeconds = max(0, n.ready.Sub(o.deleting).Seconds())
		}
		u.StartSeconds, u.EndSeconds = sec(start), sec(end)
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b report.NodeUpdate) int { return int((a.StartSeconds - b.StartSeconds) * 1000) })
	return out
}
