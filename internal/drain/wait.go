package drain

// The wait of one pod's loop: when every load balancer that sent the pod
// new connections has stopped (read back, or, in node mode, the nodes'
// kube-proxy synced), and the settle the provider asks for after it.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// wait returns true once no load balancer sends the pod's backend new
// connections (each has it in drain or no more) and, where the provider says
// its data plane follows changes with a delay (provider.Settler), that delay
// has passed since it was seen. A
// failed look (HAProxy's socket busy in a reload, Azure throttling) is
// looked at again, later each time: only ctx's deadline ends the wait.
func (h *Handler) wait(ctx context.Context, pod *corev1.Pod) (bool, string, error) {
	log := h.opts.Logger.WithValues("pod", pod.Namespace+"/"+pod.Name)
	desc := ""
	var lastErr error
	var removedSince time.Time
	pw := &proxyWait{synced: map[string]bool{}}
	backoff := h.opts.PollInterval
	for {
		next := h.opts.PollInterval
		targets, err := h.opts.Finder.Targets(ctx, pod)
		switch {
		case err != nil && ctx.Err() != nil:
			return false, desc, lastErr
		case err != nil:
			if lastErr == nil {
				log.Info("drain: load balancer read failed, looking again until the deadline", "err", err)
			}
			lastErr = err
			next, backoff = backoff, min(2*backoff, max(maxBackoff, h.opts.PollInterval))
			if ra := (*provider.RetryAfterError)(nil); errors.As(err, &ra) && ra.After > next {
				next = ra.After
			}
		default:
			lastErr, backoff = nil, h.opts.PollInterval
			desc = lbtarget.Describe(targets)
			if !noNewConnections(targets) {
				removedSince = time.Time{}
				break
			}
			if waiting, err := h.proxiesSynced(ctx, pod, targets, pw); err != nil || waiting > 0 {
				if ctx.Err() != nil {
					// The call was answered or went away: nothing to log.
					return false, desc, lastErr
				}
				if err != nil {
					if lastErr == nil {
						log.Info("drain: kube-proxy healthz not answering, looking again until the deadline", "err", err)
					}
					lastErr = err
				}
				desc = fmt.Sprintf("%s; waiting for kube-proxy on %d node(s) to sync", desc, waiting)
				break
			}
			if removedSince.IsZero() {
				removedSince = time.Now()
			}
			settle := h.settle(targets)
			if time.Since(removedSince) >= settle {
				return true, desc, nil
			}
			desc = fmt.Sprintf("draining; the load balancer settles for %s", settle)
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, desc, lastErr
		case <-t.C:
		}
	}
}

// proxyWait is what a wait loop remembers of kube-proxy between two looks.
type proxyWait struct {
	synced      map[string]bool // nodes whose kube-proxy synced after the deletion began
	publishedAt time.Time       // when this replica's cache first showed the endpoint change
}

// proxiesSynced counts the nodes of node-mode targets (Target.Sending) that
// may still send the pod new connections through kube-proxy. There is no
// exact signal that a kube-proxy has programmed a change; the heuristic is:
//
//   - this replica's cache shows the pod's endpoint terminating (or gone):
//     the change is written, and every kube-proxy watches it as this cache
//     does;
//   - every such kube-proxy answers /healthz with a sync of the pod's IP
//     family that ended after the pod's deletion began: it is alive and
//     syncing (one that does not answer keeps the call waiting, until the
//     load balancer's probe takes its node out of Sending, or the deadline);
//   - KubeProxyMargin has passed since the cache showed the change: the time
//     for kube-proxy's watch and its sync, which follows a change within its
//     --min-sync-period (1 s by default).
//
// It does not wait for a sync after the change plus a margin: kube-proxy in
// nftables mode syncs only on changes (and hourly), so a change synced within
// the margin would hold the call to its deadline (the lab's kube-proxy test
// saw it).
func (h *Handler) proxiesSynced(ctx context.Context, pod *corev1.Pod, targets []lbtarget.Target, pw *proxyWait) (int, error) {
	started := lbtarget.DeletionStart(pod)
	family := "IPv4"
	if a, err := netip.ParseAddr(pod.Status.PodIP); err == nil && a.Unmap().Is6() {
		family = "IPv6"
	}
	waiting, published, sending := 0, true, false
	var lastErr error
	seen := map[string]bool{}
	for _, t := range targets {
		if len(t.Sending) > 0 {
			sending = true
			published = published && t.ChangePublished
		}
		for _, node := range t.Sending {
			if pw.synced[node] || seen[node] {
				continue
			}
			seen[node] = true
			if h.opts.KubeProxy == nil {
				if time.Now().After(started.Add(h.opts.KubeProxyFallback)) {
					pw.synced[node] = true
				} else {
					waiting++
				}
				continue
			}
			ok, err := h.opts.KubeProxy.SyncedAfter(ctx, node, family, started)
			switch {
			case err != nil:
				lastErr = err
				waiting++
			case ok:
				pw.synced[node] = true
			default:
				waiting++
			}
		}
	}
	if !sending {
		return 0, nil
	}
	switch {
	case !published:
		pw.publishedAt = time.Time{}
		return max(waiting, 1), lastErr
	case pw.publishedAt.IsZero():
		pw.publishedAt = time.Now()
	}
	if h.opts.KubeProxy != nil && time.Since(pw.publishedAt) < h.opts.KubeProxyMargin {
		return max(waiting, 1), lastErr
	}
	return waiting, lastErr
}

// settle is the longest removal delay of the pod's IP-mode load balancers.
func (h *Handler) settle(targets []lbtarget.Target) time.Duration {
	s, ok := h.opts.Finder.Provider.(provider.Settler)
	if !ok {
		s = noSettle{}
	}
	var d time.Duration
	for _, t := range targets {
		switch {
		case t.GateOnly:
			// Drained by the pool (the node out of it, or admin Down) as ARM
			// reports it applied: the data plane takes it on later. Drained
			// by the probe Down: that is the data plane's own state.
			if t.LastLocal && (!t.Registered || t.State != model.Active) {
				d = max(d, t.Settle)
			}
		case t.LastLocal && t.ProbedDown:
			// Drained by the probe Down, read as news: the data plane's
			// own state, nothing to settle.
		case !t.Node || t.LastLocal:
			d = max(d, s.RemovalSettle(t.LB, t.Listener))
		}
	}
	return d
}

// noNewConnections: no load balancer has the pod's own backend active: each
// has it in drain (or maintenance, on its way out) or not at all, as the
// provider reads it back (for a gate-only Service, or its probe Down). In node mode that backend is the node, and it is
// the pod's own only when the pod is its node's last local endpoint of an
// externalTrafficPolicy Local Service (Target.LastLocal); otherwise the node
// stays and kube-proxy is what must stop sending (proxiesSynced).
func noNewConnections(targets []lbtarget.Target) bool {
	for _, t := range targets {
		// A node's last local pod: its node may stay in the pool, active
		// (the other controller's, for a gate-only Service; zerodrop's own
		// while the step holds the last node up, or its drain is being
		// written); the node's probe Down, read back as news after the
		// deletion began, says the load balancer stopped.
		if (!t.Node || t.LastLocal) && t.Registered && t.State == model.Active && !t.ProbedDown {
			return false
		}
	}
	return true
}

// noSettle is the settle of a provider without one.
type noSettle struct{}

func (noSettle) RemovalSettle(string, string) time.Duration { return 0 }
