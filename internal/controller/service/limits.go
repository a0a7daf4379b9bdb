package service

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// checkLedger is the health-check demand of every Service the controller
// serves (issue 46, M8). The per-replica budget spans every load balancer,
// while a reconcile sees one: the ledger lets it fit its Services among all
// the others (model.FitChecks), and names the load balancers whose stretch
// changed, so they are reconciled again.
//
// A reconcile's new demands count for the others only once its write is
// done (commit): until then a Service's demand is the larger of its old and
// new one. So budget a Service frees (fewer backends, a Service deleted) is
// given to the newer ones only after the write that frees it, never before.
type checkLedger struct {
	mu     sync.Mutex
	limits model.Limits
	// demands by Service (namespace/name), the Services of each load
	// balancer key, and the key of each Service.
	demands map[string]model.CheckDemand
	byKey   map[string][]model.CheckDemand
	keyOf   map[string]string
	// pending are the demands of a reconcile not written yet, by key.
	pending map[string][]model.CheckDemand
	// factors is FitChecks over demands; applied the factor each Service
	// was last written with.
	factors map[string]int
	applied map[string]int
	// mismatch are the Services of applied whose factor in factors is
	// another (their load balancers are to be written again), and
	// nStretched the Services factors stretches: both kept as those maps
	// change, since a reconcile's commit and set must not walk every
	// Service (at 10,000 Services that walk, per load balancer and under
	// mu, was half a control role's CPU and held its workers in turn).
	mismatch   map[string]bool
	nStretched int
	// rates are the checks per second of each load balancer as last
	// written or found unchanged, rate their sum.
	rates map[string]float64
	rate  float64
	// over counts, per key, the Services over a cap by limit.
	over map[string]map[string]int
}

func newCheckLedger(l model.Limits) *checkLedger {
	return &checkLedger{limits: l, demands: map[string]model.CheckDemand{}, byKey: map[string][]model.CheckDemand{},
		keyOf: map[string]string{}, pending: map[string][]model.CheckDemand{}, factors: map[string]int{},
		applied: map[string]int{}, mismatch: map[string]bool{}, rates: map[string]float64{}, over: map[string]map[string]int{}}
}

// fits reports whether the limits stretch checks at all.
func (l *checkLedger) fits() bool {
	return l.limits.MaxServiceCheckRate > 0 || l.limits.NodeCheckBudget > 0
}

// put replaces key's demands, without refitting; it reports whether they
// changed.
func (l *checkLedger) put(key string, ds []model.CheckDemand) bool {
	ds = append([]model.CheckDemand(nil), ds...)
	sort.Slice(ds, func(i, j int) bool { return ds[i].Service < ds[j].Service })
	old := l.byKey[key]
	if len(old) == len(ds) {
		same := true
		for i := range ds {
			same = same && old[i].Service == ds[i].Service && old[i].Rate == ds[i].Rate && old[i].Created.Equal(ds[i].Created)
		}
		if same {
			return false
		}
	}
	for _, d := range old {
		if l.keyOf[d.Service] == key {
			delete(l.demands, d.Service)
			delete(l.keyOf, d.Service)
		}
	}
	for _, d := range ds {
		l.demands[d.Service], l.keyOf[d.Service] = d, key
	}
	if len(ds) == 0 {
		delete(l.byKey, key)
	} else {
		l.byKey[key] = ds
	}
	return true
}

// refit computes every Service's factor again. Where the budget does not
// bind — the Services' rates, each after its own cap, sum to less than it —
// FitChecks gives each Service its own cap's factor, found here without its
// sorted copy and new map: at 10,000 Services each Service created or
// deleted refits twice, and those copies were most of what a control
// role allocated while its heap stood near GOMEMLIMIT.
func (l *checkLedger) refit() {
	per, budget := l.limits.MaxServiceCheckRate, l.limits.NodeCheckBudget
	sum := 0.0
	for _, d := range l.demands {
		_, r := model.OwnCheckFactor(d.Rate, per)
		sum += r
	}
	// A margin for the rounding of FitChecks' running subtraction.
	if budget <= 0 || sum < budget*(1-1e-9) {
		for svc := range l.factors {
			if _, ok := l.demands[svc]; !ok {
				delete(l.factors, svc)
			}
		}
		for svc, d := range l.demands {
			l.factors[svc], _ = model.OwnCheckFactor(d.Rate, per)
		}
	} else {
		all := make([]model.CheckDemand, 0, len(l.demands))
		for _, d := range l.demands {
			all = append(all, d)
		}
		l.factors = model.FitChecks(all, per, budget)
	}
	l.nStretched = 0
	for _, f := range l.factors {
		if f > 1 {
			l.nStretched++
		}
	}
	l.recheck()
}

// recheck finds mismatch again from applied and factors.
func (l *checkLedger) recheck() {
	clear(l.mismatch)
	for svc, f := range l.applied {
		if max(l.factors[svc], 1) != f {
			l.mismatch[svc] = true
		}
	}
}

// set records key's new demands as pending and returns the factor each of
// them is to be written with: fitted with, for key's own Services, the
// larger of their old and new demands (so never less stretched than the
// others assume), and the number of Services stretched.
func (l *checkLedger) set(key string, ds []model.CheckDemand) (map[string]int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending[key] = ds
	larger := map[string]model.CheckDemand{}
	for _, d := range l.byKey[key] {
		larger[d.Service] = d
	}
	for _, d := range ds {
		if o, ok := larger[d.Service]; !ok || d.Rate > o.Rate {
			larger[d.Service] = d
		}
	}
	merged := make([]model.CheckDemand, 0, len(larger))
	for _, d := range larger {
		merged = append(merged, d)
	}
	if l.put(key, merged) {
		l.refit()
	}
	out := make(map[string]int, len(ds))
	for _, d := range ds {
		out[d.Service] = max(l.factors[d.Service], 1)
		l.applied[d.Service] = out[d.Service]
		delete(l.mismatch, d.Service)
	}
	return out, l.stretched()
}

// commit makes key's pending demands count, once its write is done (or
// nothing was to write), and returns the load balancers, key included,
// whose Services are to be written with another factor than they were.
func (l *checkLedger) commit(key string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ds, ok := l.pending[key]
	if !ok {
		return nil
	}
	delete(l.pending, key)
	keep := map[string]bool{}
	for _, d := range ds {
		keep[d.Service] = true
	}
	for _, d := range l.byKey[key] {
		if !keep[d.Service] {
			delete(l.applied, d.Service)
			delete(l.mismatch, d.Service)
		}
	}
	if l.put(key, ds) {
		l.refit()
	}
	// Also when key's demands did not change here: set counted an increase
	// at once, and the Services it pushed further are written only now.
	again := map[string]bool{}
	for svc := range l.mismatch {
		if k := l.keyOf[svc]; k != "" {
			again[k] = true
		}
	}
	out := make([]string, 0, len(again))
	for k := range again {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (l *checkLedger) stretched() int { return l.nStretched }

// wrote records the checks per second key's load balancer runs (lb nil:
// deleted) and returns the sum over every load balancer.
func (l *checkLedger) wrote(key string, lb *model.LoadBalancer) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rate -= l.rates[key]
	delete(l.rates, key)
	if r := model.CheckRate(lb); r > 0 {
		l.rates[key] = r
		l.rate += r
	}
	return l.rate
}

// setOver records key's Services over a cap, by limit, and returns the
// totals over every key.
func (l *checkLedger) setOver(key string, counts map[string]int) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(counts) == 0 {
		delete(l.over, key)
	} else {
		l.over[key] = counts
	}
	total := map[string]int{model.LimitPorts: 0}
	for _, byLimit := range l.over {
		for limit, n := range byLimit {
			total[limit] += n
		}
	}
	return total
}

// checkLimits refuses a Service over a cap of model.Limits: like a bad
// annotation (invariant 7), so one served before the cap keeps its listeners
// as they are while its backends follow its endpoints.
func (c *Controller) checkLimits(svc *corev1.Service) error {
	return c.opts.Limits.CheckService(svc)
}

// countOver updates zerodrop_services_over_limit from key's invalid Services.
func (c *Controller) countOver(key string, st *state) {
	counts := map[string]int{}
	for _, err := range st.invalid {
		var le *model.LimitError
		if errors.As(err, &le) {
			counts[le.Limit]++
		}
	}
	for limit, n := range c.checks.setOver(key, counts) {
		c.opts.Metrics.ServicesOverLimit.WithLabelValues(limit).Set(float64(n))
	}
}

// countWritten updates zerodrop_health_checks_per_second with key's load
// balancer as the reconcile left it.
func (c *Controller) countWritten(key string, lb *model.LoadBalancer) {
	c.opts.Metrics.HealthCheckRate.Set(c.checks.wrote(key, lb))
}

func demandOf(svc *corev1.Service, lb *model.LoadBalancer) model.CheckDemand {
	key := svc.Namespace + "/" + svc.Name
	return model.CheckDemand{Service: key, Created: svc.CreationTimestamp.Time, Rate: model.ServiceCheckRate(lb, key)}
}

// demands are the checks per second key's Services ask: the active ones'
// listeners in desired at the intervals they ask for, the held ones' as
// their valid configuration asks (held: what keepInvalid keeps is theirs,
// at most that). The same computation at start (seedChecks) and in every
// reconcile, so that a restart finds the same stretch (invariant 1).
func demands(st *state, desired, held *model.LoadBalancer) []model.CheckDemand {
	out := make([]model.CheckDemand, 0, len(st.active)+len(st.held))
	for _, in := range st.active {
		out = append(out, demandOf(in.Service, desired))
	}
	for _, in := range st.held {
		out = append(out, demandOf(in.Service, held))
	}
	return out
}

// fitChecks fits key's Services into the check limits: each active
// Service's check intervals in desired (which must not hold the held
// Services' kept listeners yet) are stretched by its factor, with a warning
// (ConfigValid=False and a Warning Event where this role writes the
// Services). Backends are never dropped.
func (c *Controller) fitChecks(key string, st *state, desired, held *model.LoadBalancer) []model.Warning {
	if !c.checks.fits() {
		return nil
	}
	factors, stretched := c.checks.set(key, demands(st, desired, held))
	c.opts.Metrics.HealthCheckStretched.Set(float64(stretched))
	var ws []model.Warning
	for _, in := range st.active {
		svcKey := in.Service.Namespace + "/" + in.Service.Name
		f := factors[svcKey]
		if f <= 1 {
			continue
		}
		model.StretchChecks(desired, svcKey, f)
		// No figure that moves with the endpoints: a new message is a new
		// Warning Event.
		ws = append(ws, model.Warning{Service: svcKey, Reason: ReasonHealthChecksStretched, Message: fmt.Sprintf(
			"health checks every %d times the interval asked: every load balancer replica checks every backend of every port, and this Service is over the cap of %g checks a second per Service, or past what the older Services leave of the replica's budget of %g (the newest yield first); every backend is kept",
			f, c.opts.Limits.MaxServiceCheckRate, c.opts.Limits.NodeCheckBudget)})
	}
	return ws
}

// commitChecks makes key's new demands count for the others once its
// write is done, and reconciles again the load balancers whose stretch
// that changed.
func (c *Controller) commitChecks(key string) {
	if !c.checks.fits() {
		return
	}
	for _, k := range c.checks.commit(key) {
		c.queue.Add(k)
	}
}

// seedChecks fills the ledger with every Service's demand before the first
// reconcile, as the reconciles compute it: without it the first load
// balancers reconciled after a start would fit among a partial ledger, be
// written unstretched and stretched again once the others are known.
func (c *Controller) seedChecks(ctx context.Context) error {
	if !c.checks.fits() {
		return nil
	}
	var list corev1.ServiceList
	if err := c.cache.List(ctx, &list); err != nil {
		return fmt.Errorf("list services: %w", err)
	}
	seen := map[string]bool{}
	for i := range list.Items {
		svc := &list.Items[i]
		key := c.opts.KeyFunc(svc)
		if !c.managed(svc) || seen[key] {
			continue
		}
		seen[key] = true
		st, err := c.collect(ctx, key)
		if err != nil {
			return err
		}
		desired, held, err := c.checkInputs(ctx, key, st)
		if err != nil {
			return err
		}
		c.checks.mu.Lock()
		c.checks.put(key, demands(st, desired, held))
		c.checks.mu.Unlock()
	}
	c.checks.mu.Lock()
	c.checks.refit()
	// What is written is taken to be this fit: a restart with nothing
	// changed finds it so, and anything else is reconciled at start anyway.
	for svc, f := range c.checks.factors {
		c.checks.applied[svc] = f
	}
	c.checks.recheck()
	n := c.checks.stretched()
	c.checks.mu.Unlock()
	c.opts.Metrics.HealthCheckStretched.Set(float64(n))
	return nil
}

// checkInputs builds key's desired load balancer as the reconcile of this
// role does, for the demands only (no address: the rate does not need it).
func (c *Controller) checkInputs(ctx context.Context, key string, st *state) (desired, held *model.LoadBalancer, err error) {
	nodes, err := c.nodes(ctx, append(st.active[:len(st.active):len(st.active)], st.held...))
	if err != nil {
		return nil, nil, err
	}
	dopts := c.desiredOptions(ctx, nodes)
	desired, _ = model.Desired(key, st.active, dopts)
	held, _ = model.Desired(key, st.held, dopts)
	return desired, held, nil
}

// desiredOptions are model.Desired's options as this role's reconcile uses
// them: the control role does not register pods the readiness gate waits
// for (it writes no load balancer). Where the provider's probe, not a
// write, takes a Local Service's node out (provider.ProbeDecider: Azure),
// node-mode Local listeners keep every node active.
func (c *Controller) desiredOptions(ctx context.Context, nodes []*corev1.Node) model.DesiredOptions {
	o := model.DesiredOptions{
		Nodes:                nodes,
		Unsupported:          c.opts.Provider.Unsupported(),
		AddressMap:           c.opts.BackendAddressMap,
		KubeProxyHealthzPort: c.opts.KubeProxyHealthzPort,
		ProbeDecidesLocal:    provider.ProbeDecidesLocal(c.opts.Provider),
	}
	if c.opts.Role != RoleControl {
		o.GatePending = c.gatePending(ctx)
	}
	return o
}
