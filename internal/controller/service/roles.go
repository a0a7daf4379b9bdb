package service

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"zerodrop.dev/zerodrop/internal/lbtarget"
	"zerodrop.dev/zerodrop/internal/model"
)

// Role chooses which writes a controller process makes. One process may make
// them all (RoleAll); an HAProxy data plane of several replicas splits them,
// so that each HAProxy has exactly one writer, its own replica's zerodrop
// process (invariant 2), and the Kubernetes objects have exactly one, the
// elected controller.
type Role string

const (
	// RoleAll: the leader allocates frontend addresses, writes the Services
	// (status, finalizer, Events) and writes the provider.
	RoleAll Role = ""
	// RoleControl: the leader allocates frontend addresses and writes the
	// Services, and never writes a load balancer: every data-plane replica
	// (Options.Replicas) writes its own. Ready turns True when every replica
	// that counts serves the Service; a deleted Service's finalizer goes when
	// none has a listener of it left.
	RoleControl Role = "control"
	// RoleDataPlane: every process (no leader election) writes only its own
	// load balancer, from the frontend addresses the control role recorded in
	// the Services' status, and writes nothing to Kubernetes but Events of
	// persistent failures.
	RoleDataPlane Role = "data-plane"
)

// ReasonDataPlanePending is the Ready condition's reason while a data-plane
// replica that counts does not serve the Service yet.
const ReasonDataPlanePending = "DataPlanePending"

// errNoAddress: a data-plane replica serves a Service at the address the
// control role gave it, and there is none yet. The Service is treated like an
// invalid one (its listeners, if any, stay as they are) until its status has
// an address; the replica writes no status, so this is only logged.
var errNoAddress = errors.New("no frontend address in the Service's status yet (the control role allocates it)")

// statusAddress is a data-plane replica's frontend address of svc: the one
// the control role wrote to its status, if it is in pool (when pool is
// valid). Anyone who can write a Service's status could otherwise make every
// edge node bind an address of their choosing — a node's, the API
// server's — so an address outside the pool is refused like an invalid
// Service: its listeners stay as they were.
func statusAddress(svc *corev1.Service, pool netip.Prefix) (string, error) {
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue
		}
		if !pool.IsValid() {
			return ing.IP, nil
		}
		if addr, err := netip.ParseAddr(ing.IP); err != nil || !pool.Contains(addr) {
			return "", fmt.Errorf("the Service's status address %q is not in the address pool %s: not bound", ing.IP, pool)
		}
		return ing.IP, nil
	}
	return "", errNoAddress
}

// ipMode is the ingress' ipMode. With a data plane of replicas the address
// is the replicas' own (announced by routing, not held by kube-proxy):
// Proxy (KEP-1860) keeps kube-proxy from capturing traffic to it on the
// nodes, so it reaches an HAProxy.
func (c *Controller) ipMode() corev1.LoadBalancerIPMode {
	if c.opts.Role == RoleControl {
		return corev1.LoadBalancerIPModeProxy
	}
	return corev1.LoadBalancerIPModeVIP
}

// replicaViews is the load balancer key as every data-plane replica that
// counts has it, by replica name. A replica that cannot be read is in
// unread: it still counts, and what it serves is unknown.
type replicaViews struct {
	names  []string
	lbs    map[string]*model.LoadBalancer
	unread map[string]error
}

// readReplicas reads key on every replica that counts, all at once, and
// without waiting for a replica whose last read failed (replicaReads).
func (c *Controller) readReplicas(ctx context.Context, key string) (*replicaViews, error) {
	rs, err := c.opts.Replicas(ctx)
	if err != nil {
		return nil, fmt.Errorf("data-plane replicas: %w", err)
	}
	lbs, unread := c.replicaReads.observe(ctx, rs, key)
	return newReplicaViews(rs, lbs, unread), nil
}

// newReplicaViews is the replicas rs as a look found them: lbs read,
// unread not answering.
func newReplicaViews(rs []lbtarget.Replica, lbs map[string]*model.LoadBalancer, unread map[string]error) *replicaViews {
	v := &replicaViews{lbs: lbs, unread: unread}
	for _, r := range rs {
		v.names = append(v.names, r.Name)
	}
	sort.Strings(v.names)
	return v
}

// waiting lists the replicas that do not serve every listener of svc in
// desired at its address, and why; with no replica at all nothing serves it.
func (v *replicaViews) waiting(svcKey string, desired *model.LoadBalancer) []string {
	if len(v.names) == 0 {
		return []string{"no data-plane replica counts"}
	}
	var out []string
	for _, name := range v.names {
		if err, bad := v.unread[name]; bad {
			out = append(out, fmt.Sprintf("%s (not answering: %v)", name, err))
			continue
		}
		lb := v.lbs[name]
		for _, l := range desired.Listeners {
			if !strings.HasPrefix(l.Name, svcKey+"/") {
				continue
			}
			if o := lb.Listener(l.Name); o == nil || o.Address != l.Address || o.Port != l.Port {
				out = append(out, name+" (listener "+l.Name+" not there yet)")
				break
			}
		}
	}
	return out
}

// listening lists the replicas that still have a listener of svcKey, or
// cannot be read (they may).
func (v *replicaViews) listening(svcKey string) []string {
	var out []string
	for _, name := range v.names {
		if _, bad := v.unread[name]; bad {
			out = append(out, name+" (not answering)")
			continue
		}
		if lb := v.lbs[name]; lb != nil {
			for _, l := range lb.Listeners {
				if strings.HasPrefix(l.Name, svcKey+"/") {
					out = append(out, name)
					break
				}
			}
		}
	}
	return out
}

// removing reports whether a replica that answers still has a listener of
// svcKey: its removal is under way there (a drain), and ends by itself.
// One that does not answer may have one too; that wait ends when it
// answers again or stops counting.
func (v *replicaViews) removing(svcKey string) bool {
	for _, name := range v.names {
		if lb := v.lbs[name]; lb != nil {
			for _, l := range lb.Listeners {
				if strings.HasPrefix(l.Name, svcKey+"/") {
					return true
				}
			}
		}
	}
	return false
}

// unservedYet sets why each of fresh, the Services whose address is
// written now, is not served: in the words the next look at the replicas
// will use while none serves it yet — each replica that counts without its
// listener, or not answering as its last read found it, or no replica at
// all. Only the replicas' list is read (the cache), no replica, so a
// replica that does not answer delays no address. Worded otherwise, every
// new Service's status was written a second time by its next look, a
// second later, only to change that message: a control role with
// thousands of new Services made thousands of writes more, and one
// restarted before they were done made them in its first pass, where a
// restart with nothing changed writes nothing (invariant 1).
func (c *Controller) unservedYet(ctx context.Context, fresh []model.ServiceInput, desired *model.LoadBalancer, unserved map[*corev1.Service]string) {
	const fallback = "waiting for data-plane replicas: they serve the Service at the address in its status, written now"
	var views *replicaViews
	if rs, err := c.opts.Replicas(ctx); err != nil {
		logFrom(ctx).V(1).Info("listing the data-plane replicas for a new Service's status", "err", err.Error())
	} else {
		views = newReplicaViews(rs, map[string]*model.LoadBalancer{}, c.replicaReads.failed(rs))
	}
	for _, in := range fresh {
		unserved[in.Service] = fallback
		if views == nil {
			continue
		}
		if w := views.waiting(in.Service.Namespace+"/"+in.Service.Name, desired); len(w) > 0 {
			unserved[in.Service] = "waiting for data-plane replicas: " + strings.Join(w, ", ")
		}
	}
}

// reconcileControl is RoleControl's reconcile: addresses, finalizers and
// status, with Ready and the finalizer's removal read from the data-plane
// replicas. It writes no load balancer. It asks for the next look while a
// Service waits for the replicas (againWaiting: they serve it, or remove a
// deleted one's listeners, on their own, and the looks back off), or
// sooner while a deleted Service's listeners are being removed by a
// replica that answers (againPoll, as a drain).
func (c *Controller) reconcileControl(ctx context.Context, key string) (string, again, error) {
	st, err := c.collect(ctx, key)
	if err != nil {
		return resultError, againOnChange, err
	}
	for i := range st.active {
		in := &st.active[i]
		addr, err := c.address(in.Service, in.Config, nil)
		if err != nil {
			st.invalid[in.Service] = err
			continue
		}
		in.Address = addr
	}
	st.active = dropInvalid(st.active, st.invalid)
	if err := c.ensureFinalizers(ctx, st.active); err != nil {
		return resultError, againOnChange, err
	}
	nodes, err := c.nodes(ctx, st.active)
	if err != nil {
		return resultError, againOnChange, err
	}
	desired, warnings := model.Desired(key, st.active, c.desiredOptions(ctx, nodes))
	// The check limits as the replicas fit them, for the Services' status
	// (model.Limits): the held Services' demands count as theirs do.
	if c.checks.fits() {
		_, held, err := c.checkInputs(ctx, key, st)
		if err != nil {
			return resultError, againOnChange, err
		}
		warnings = append(warnings, c.fitChecks(key, st, desired, held)...)
		c.commitChecks(key) // the control role writes no load balancer
	}
	c.countOver(key, st)
	// A Service whose status does not carry its address yet is served by
	// no replica: they take the address from the status. Its status is
	// written first, Ready False, without reading any replica; the replicas
	// are read (for the others, and for it on the next look) after.
	next := againOnChange
	st.unserved = map[*corev1.Service]string{}
	var fresh []model.ServiceInput
	for _, in := range st.active {
		if a, err := statusAddress(in.Service, netip.Prefix{}); err != nil || a != in.Address {
			fresh = append(fresh, in)
		}
	}
	if len(fresh) > 0 {
		c.unservedYet(ctx, fresh, desired, st.unserved)
		next = againWaiting
		first := &state{key: key, active: fresh, unserved: st.unserved}
		if err := c.updateStatuses(ctx, first, model.Plan{}, warnings); err != nil {
			if apierrors.IsConflict(err) {
				return resultConflict, againOnChange, err
			}
			return resultError, againOnChange, err
		}
	}
	if len(st.active) > len(fresh) || len(st.leaving) > 0 {
		views, err := c.readReplicas(ctx, key)
		if err != nil {
			return resultError, againOnChange, err
		}
		for _, in := range st.active {
			if _, isFresh := st.unserved[in.Service]; isFresh {
				continue
			}
			svcKey := in.Service.Namespace + "/" + in.Service.Name
			if w := views.waiting(svcKey, desired); len(w) > 0 {
				st.unserved[in.Service] = "waiting for data-plane replicas: " + strings.Join(w, ", ")
				next = max(next, againWaiting)
			}
		}
		st.servedBy = len(views.names)
		leaving := st.leaving[:0]
		for _, svc := range st.leaving {
			if l := views.listening(svc.Namespace + "/" + svc.Name); len(l) > 0 {
				logFrom(ctx).V(1).Info("deleted Service still has listeners on data-plane replicas; keeping its finalizer", "service", svc.Namespace+"/"+svc.Name, "replicas", l)
				if views.removing(svc.Namespace + "/" + svc.Name) {
					next = againPoll
				} else {
					next = max(next, againWaiting)
				}
				continue
			}
			leaving = append(leaving, svc)
		}
		st.leaving = leaving
	}
	if err := c.updateStatuses(ctx, st, model.Plan{}, warnings); err != nil {
		if apierrors.IsConflict(err) {
			return resultConflict, againOnChange, err
		}
		return resultError, againOnChange, err
	}
	return resultNoop, next, nil
}
