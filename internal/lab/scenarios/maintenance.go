package scenarios

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/model"
)

// scenarioMaintenance is a node's maintenance as the incident's cluster
// may have had it (cloud-provider-azure #10224): the cluster autoscaler's
// deletion taint on a node that serves the workload, and nothing else
// changed for longer than the upstream service controller's node resync
// (its Node informer's 100 s, nodeSyncPeriod in k8s.io/cloud-provider's
// controllers/service/controller.go, whose update handler syncs only what
// shouldSyncUpdatedNode names, which a taint is not); then the writer
// restarted as restart-idle restarts it. The controller's own comment
// there says a tainted node is dropped at the next sync anything else
// causes, without connection draining: a restart is such a sync.
const scenarioMaintenance = "maintenance"

// DefaultMaintenanceWait is how long maintenance leaves the tainted node
// before the first restart (Options.MaintenanceWait): three node resyncs.
const DefaultMaintenanceWait = 5 * time.Minute

// maintenanceSignal is Options.MaintenanceSignal, or its default.
func (o Options) maintenanceSignal() string {
	if o.MaintenanceSignal != "" {
		return o.MaintenanceSignal
	}
	return report.SignalTaint
}

// maintenanceWait is Options.MaintenanceWait, or its default.
func (o Options) maintenanceWait() time.Duration {
	if o.MaintenanceWait > 0 {
		return o.MaintenanceWait
	}
	return DefaultMaintenanceWait
}

// actMaintenance marks a node that carries one of the lab's WebSockets
// (leavingNode) as leaving — tainted ToBeDeletedByClusterAutoscaler with the NoSchedule
// effect, as the cluster autoscaler does before it drains a node, or
// labelled to be excluded from load balancers (Options.MaintenanceSignal)
// — waits maintenanceWait counting what that costs, and then restarts the
// writer as restart-idle does. The teardown takes the mark off again.
func actMaintenance(ctx context.Context, r *run) error {
	node, carried, err := r.leavingNode(ctx)
	if err != nil {
		return err
	}
	r.mark("%s carries %d of the lab's open WebSockets", node, carried)
	signal := r.lab.opts.maintenanceSignal()
	addr, err := r.lab.setLeaving(ctx, node, signal, true)
	if err != nil {
		return fmt.Errorf("mark %s leaving (%s): %w", node, signal, err)
	}
	r.tainted = append(r.tainted, node)
	r.taintedAddrs[addr] = true
	if signal == report.SignalExcludeLabel {
		r.mark("%s labelled %s", node, model.LabelExcludeFromLB)
	} else {
		r.mark("%s tainted %s:NoSchedule", node, model.TaintToBeDeletedByClusterAutoscaler)
	}
	before, err := r.world.Writes()
	if err != nil {
		return err
	}
	// Each write of the wait, by verb and when it landed, goes in the
	// timeline: a count alone does not say what the writer did.
	var (
		mu     sync.Mutex
		landed []string
	)
	taintedAt := time.Now()
	ww, watched := r.world.(world.WriteWatcher)
	if watched {
		ww.OnWrite(func(verb string) {
			mu.Lock()
			defer mu.Unlock()
			landed = append(landed, fmt.Sprintf("%s (+%.1fs)", verb, time.Since(taintedAt).Seconds()))
		})
	}
	snap := r.rec.Snapshot()
	wait := r.lab.opts.maintenanceWait()
	slept := traffic.SleepCtx(ctx, wait)
	if watched {
		ww.OnWrite(nil)
	}
	if !slept {
		return ctx.Err()
	}
	after, err := r.world.Writes()
	if err != nil {
		return err
	}
	mu.Lock()
	if len(landed) > 0 {
		r.mark("writes after the mark: %s", strings.Join(landed, ", "))
	}
	mu.Unlock()
	now := r.rec.Snapshot()
	r.maintenance = &report.MaintenanceFigures{Node: node, Signal: signal, WebSocketsThrough: carried, WaitSeconds: wait.Seconds(), WritesDuringWait: after - before,
		FailedDuringWait: now.Failed - snap.Failed, BrokenDuringWait: now.LongBroken - snap.LongBroken}
	r.mark("%s of nothing else changing: %d writes", wait, after-before)
	return actRestartIdle(ctx, r)
}

// leavingNode is the node the scenario marks leaving: the one that most of
// the lab's open WebSockets entered by, so that the node's drain has a
// connection to keep (with none, zerodrop rightly removes the drained
// node at once, and the scenario would show nothing of a kept drain);
// ties and no WebSocket at all go to the node of the workload's first
// running pod (by name). A WebSocket entered by the node whose address it
// came from (kube-proxy masquerades Cluster traffic), otherwise by its
// pod's node (Local keeps the load balancer's address and the pod's node).
func (r *run) leavingNode(ctx context.Context) (node string, carried int, err error) {
	first, err := r.firstPodNode(ctx)
	if err != nil {
		return "", 0, err
	}
	nodes, err := r.lab.cp.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", 0, err
	}
	byAddr := map[string]string{}
	for _, n := range nodes.Items {
		if a := model.NodeAddress(&n); a != "" {
			byAddr[a] = n.Name
		}
	}
	count := map[string]int{}
	for _, ws := range r.lab.agent.WebSockets(r.ns) {
		entry, ok := byAddr[ws.Peer.String()]
		if !ok {
			entry = ws.PodNode
		}
		count[entry]++
	}
	node, carried = first, count[first]
	for _, n := range slices.Sorted(maps.Keys(count)) {
		if count[n] > carried {
			node, carried = n, count[n]
		}
	}
	return node, carried, nil
}

// firstPodNode is the node of the workload's first running pod, by name.
func (r *run) firstPodNode(ctx context.Context) (string, error) {
	pods, err := r.lab.cp.Client.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + appName})
	if err != nil {
		return "", err
	}
	first := ""
	node := ""
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && (first == "" || p.Name < first) {
			first, node = p.Name, p.Spec.NodeName
		}
	}
	if node == "" {
		return "", fmt.Errorf("no running pod of %s", r.key())
	}
	return node, nil
}

// setLeaving puts the signal that node leaves on it — the cluster
// autoscaler's deletion taint (its value the time, as the autoscaler
// writes it) or the exclusion label — or takes both off (on false), and
// returns the node's address.
func (l *lab) setLeaving(ctx context.Context, node, signal string, on bool) (addr string, err error) {
	nodes := l.cp.Client.CoreV1().Nodes()
	// The agent updates the Node's status meanwhile: a conflict is retried.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var taints []corev1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key != model.TaintToBeDeletedByClusterAutoscaler {
				taints = append(taints, t)
			}
		}
		delete(n.Labels, model.LabelExcludeFromLB)
		switch {
		case on && signal == report.SignalExcludeLabel:
			if n.Labels == nil {
				n.Labels = map[string]string{}
			}
			n.Labels[model.LabelExcludeFromLB] = "true"
		case on:
			taints = append(taints, corev1.Taint{Key: model.TaintToBeDeletedByClusterAutoscaler,
				Value: strconv.FormatInt(time.Now().Unix(), 10), Effect: corev1.TaintEffectNoSchedule})
		}
		n.Spec.Taints = taints
		addr = model.NodeAddress(n)
		_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	return addr, err
}
