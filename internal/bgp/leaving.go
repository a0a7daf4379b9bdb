package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

const (
	// ExcludeLabel takes a node out of external load balancers (the
	// cloud providers' service controllers honour it too).
	ExcludeLabel = "node.kubernetes.io/exclude-from-external-load-balancers"
	// AutoscalerTaint is the cluster autoscaler's mark on a node it is
	// about to delete.
	AutoscalerTaint = "ToBeDeletedByClusterAutoscaler"
)

// NodeLeaving says whether node is leaving, and why: the exclusion label
// (any value), the autoscaler's taint, a deletion under way, or, with
// withdrawOnCordon, a cordon. A pod's replacement is none of these: the
// node keeps its routes.
//
// Cordon is opt-in. `kubectl drain` cordons first but leaves DaemonSet
// pods running, so the data plane keeps serving a drained node; a reboot
// after the drain is then a node that stops without withdrawing, and the
// router keeps its routes stale for the graceful-restart time: MetalLB
// #2677's 120 s blackhole. Withdrawing on cordon avoids that when drains
// precede reboots. It is off by default because a cordon alone stops
// nothing (the node's HAProxy still serves) and some operators cordon for
// other reasons (no new pods) without meaning to move traffic.
func NodeLeaving(node *corev1.Node, withdrawOnCordon bool) (bool, string) {
	if node.DeletionTimestamp != nil {
		return true, "deleting"
	}
	if _, ok := node.Labels[ExcludeLabel]; ok {
		return true, "label " + ExcludeLabel
	}
	for _, t := range node.Spec.Taints {
		if t.Key == AutoscalerTaint {
			return true, "taint " + AutoscalerTaint
		}
	}
	if withdrawOnCordon && node.Spec.Unschedulable {
		return true, "cordoned"
	}
	return false, ""
}

// NodeWatcherConfig is a NodeWatcher's configuration.
type NodeWatcherConfig struct {
	Client   kubernetes.Interface
	NodeName string
	// WithdrawOnCordon counts a cordon as leaving (see NodeLeaving).
	WithdrawOnCordon bool
	Logger           *slog.Logger
}

// NodeWatcher follows the node's own Node object (an informer on that one
// object) and says whether the node is leaving. Its state changes only on
// what it sees: an event that shows the node leaving turns it on, one that
// shows it back turns it off, and the Node's deletion turns it on. Nothing
// else does: while the API server cannot be reached the last state stands,
// so an API outage never withdraws a serving node (nor brings a leaving
// one back). Before the first event it says not leaving.
type NodeWatcher struct {
	cfg NodeWatcherConfig
	log *slog.Logger

	mu      sync.Mutex
	leaving bool
	synced  chan struct{}
	once    sync.Once
	// observed, when set (tests), sees every Node the watcher is given.
	observed func(*corev1.Node)
}

// NewNodeWatcher returns a watcher for cfg; Run starts it.
func NewNodeWatcher(cfg NodeWatcherConfig) (*NodeWatcher, error) {
	if cfg.Client == nil || cfg.NodeName == "" {
		return nil, errors.New("node watcher: a client and the node's name are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &NodeWatcher{cfg: cfg, log: log.With("logger", "node", "node", cfg.NodeName), synced: make(chan struct{})}, nil
}

// Leaving is the last state seen.
func (w *NodeWatcher) Leaving() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.leaving
}

// Synced is closed once the first list of the Node has been read.
func (w *NodeWatcher) Synced() <-chan struct{} { return w.synced }

// Run watches until ctx ends.
func (w *NodeWatcher) Run(ctx context.Context) error {
	lw := cache.NewListWatchFromClient(w.cfg.Client.CoreV1().RESTClient(), "nodes", "",
		fields.OneTermEqualSelector("metadata.name", w.cfg.NodeName))
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	// The reflector retries on its own; a failed list or watch only logs.
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		w.log.Warn("watch the node (the last state stands)", "err", err, "leaving", w.Leaving())
	}); err != nil {
		return fmt.Errorf("node watcher: %w", err)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.seen(obj) },
		UpdateFunc: func(_, obj any) { w.seen(obj) },
		DeleteFunc: func(any) { w.set(true, "deleted") },
	}); err != nil {
		return fmt.Errorf("node watcher: %w", err)
	}
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			w.once.Do(func() { close(w.synced) })
			if len(inf.GetStore().ListKeys()) == 0 {
				w.log.Warn("no Node of this name: --node-name must be the node's name")
			}
		}
	}()
	inf.RunWithContext(ctx)
	return nil
}

func (w *NodeWatcher) seen(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	if w.observed != nil {
		w.observed(node)
	}
	leaving, why := NodeLeaving(node, w.cfg.WithdrawOnCordon)
	w.set(leaving, why)
}

func (w *NodeWatcher) set(leaving bool, why string) {
	w.mu.Lock()
	changed := w.leaving != leaving
	w.leaving = leaving
	w.mu.Unlock()
	if changed {
		w.log.Info("node leaving changed", "leaving", leaving, "reason", why, "at", time.Now().Format(time.RFC3339Nano))
	}
}
