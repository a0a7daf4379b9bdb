package azure

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"golang.org/x/time/rate"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// Rule health: what Azure's probes say of each backend address of a rule,
// read with ARM's rule-health operation (POST
// …/loadBalancers/{lb}/loadBalancingRules/{rule}/health, a long-running
// operation; https://learn.microsoft.com/rest/api/load-balancer/load-balancer-load-balancing-rules/health).
// It is the one read-back of probe health ARM offers: with it the readiness
// gate on Azure means "in the pool and probed Up" instead of "in the pool".
//
// It costs: each answer is a POST (ARM meters it with the subscription's
// writes: a bucket of 200 refilled at 10 a second, shared with every other
// client) and its polls. So a read of a rule begins at most once per
// HealthMaxAge (a probe changes its verdict at most once per interval, 5 s
// by default in cloud-provider-azure), counted from the last read's
// beginning, only when a caller of Backends wants the rule's health, in the
// background (Backends answers from what it has), at most maxHealthReads
// of a rule at once, and at most HealthQPS a second over all rules. Where
// the operation takes longer than HealthMaxAge (it takes as long as a
// write on the emulator: 10 s at the lab's default ARM latency) reads
// overlap, so that an answer is never much older than HealthMaxAge plus one
// read: one at a time, each begun HealthMaxAge after the last answer, a new
// pod's gate saw its probe Up up to HealthMaxAge plus two reads late (15 s
// of a rollout's 65 on emulated Azure, docs/azure.md). An answer older than
// the one kept (a read that began earlier and ended later) is dropped. Until a
// rule's first answer its health is unknown, as without rule health (a
// readiness gate then goes by the pool, as before); from then on an address
// the last answer did not list — one added since, a new pod's — is not
// healthy until an answer says its probe is Up. Until a rule's first
// answer, and while its reads fail, no address is healthy either (known
// not Up, not known Down: Probed false): "in the pool" is not "probed Up",
// and Azure probes a new backend up to an interval after ARM has it. A read
// that fails is asked again HealthMaxAge later, not at once. Where the
// operation is refused (its POST answered 400, 404, 405 or 501: a cloud or
// API version without it) or fails healthFailures times in a row, health is
// left unknown (HealthKnown false: "in the pool" again) for healthOff, and
// said once in the log. A failure while the operation runs (a 500 from its
// result, a timeout) is a failure, not a refusal.

// The defaults of Options.HealthMaxAge, HealthQPS, HealthBurst and
// HealthTimeout.
const (
	DefaultHealthMaxAge = 5 * time.Second
	DefaultHealthQPS    = 1.0
	DefaultHealthBurst  = 5
	// DefaultHealthTimeout bounds one read: the SDK keeps polling an
	// operation whose result answers 500 (a status it takes as transient),
	// and a read that never ends would freeze the rule's health.
	DefaultHealthTimeout = time.Minute
)

const (
	// healthOff is how long a rule whose health could not be read reports
	// it unknown before the operation is asked again.
	healthOff = time.Minute
	// healthFailures is how many failed answers in a row turn a rule's
	// health off.
	healthFailures = 3
	// maxHealthReads is how many reads of one rule may run at once: with
	// reads begun HealthMaxAge apart, enough to overlap an operation three
	// times as long; past that a slow ARM slows the answers, not the
	// budget.
	maxHealthReads = 3
	// healthForget is how long a rule's entry outlives its last use: a
	// rule no gate asks about any more (its Service or load balancer gone,
	// or the pod it gated ready) is forgotten, so the cache holds the
	// rules in use, not every rule ever read.
	healthForget = 10 * time.Minute
)

// ruleHealth is what is known of one rule's health.
type ruleHealth struct {
	up       map[string]bool      // address → probed Up, from the last answer
	upAt     map[string]time.Time // address → when the last read that had it Up began
	at       time.Time            // when the last answer came; zero: none yet
	asked    time.Time            // when the read that gave it began
	begun    time.Time            // when the last read began
	reading  int                  // reads running
	failures int
	failedAt time.Time // when the last read failed
	off      time.Time // until then, health is unknown
	used     time.Time // when a gate last asked
}

// healthState is the provider's rule-health cache and budget.
type healthState struct {
	rules   map[string]*ruleHealth // by load balancer "/" rule
	limiter *rate.Limiter
	pruned  time.Time // when forget last ran
}

func newHealthState(opts Options) *healthState {
	return &healthState{rules: map[string]*ruleHealth{}, limiter: rate.NewLimiter(rate.Limit(opts.HealthQPS), opts.HealthBurst)}
}

// withRuleHealth fills in the health of statuses (one load balancer's, key)
// from what is known of each rule, and asks again in the background where
// that is older than HealthMaxAge — for the rules of the listeners ctx
// wants only (provider.WithWantedListeners): the budget (HealthQPS) is
// shared by every rule, and a load balancer with more rules than it reads
// in HealthMaxAge would otherwise spend it, in the order the rules are
// listed, on rules no gate waits for, and never reach the rule a pod waits
// for (seen on emulated Azure with 30 other Services: every new pod's gate
// stayed closed).
func (p *Provider) withRuleHealth(ctx context.Context, key string, statuses []provider.BackendStatus) {
	if !p.opts.RuleHealth || len(statuses) == 0 {
		return
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range statuses {
		rule, err := ruleName(statuses[i].Listener)
		if err != nil {
			continue
		}
		p.fillHealthFor(key, rule, &statuses[i], now, provider.WantedListener(ctx, statuses[i].Listener))
	}
}

// fillHealth fills in one address's health on rule of load balancer key
// (any rule: zerodrop's, or another controller's for a gate-only Service)
// and starts a read where the last is older than HealthMaxAge. p.mu is
// held.
func (p *Provider) fillHealth(key, rule string, s *provider.BackendStatus, now time.Time) {
	p.fillHealthFor(key, rule, s, now, true)
}

// fillHealthFor is fillHealth, starting a read only for a rule the caller
// wants. p.mu is held.
func (p *Provider) fillHealthFor(key, rule string, s *provider.BackendStatus, now time.Time, wanted bool) {
	p.health.forget(now)
	h := p.health.rules[key+"/"+rule]
	if h == nil {
		h = &ruleHealth{}
		p.health.rules[key+"/"+rule] = h
	}
	if wanted {
		h.used = now
	}
	if now.Before(h.off) {
		return // unknown: HealthKnown stays false
	}
	if wanted && h.due(now, p.opts.HealthMaxAge) && p.health.limiter.Allow() {
		h.reading++
		h.begun = now
		go p.refreshRuleHealth(key, rule, h, now)
	}
	// No answer yet, or an address the last answer did not list (added
	// since): not known to be up, nor known to be down.
	addr := model.CanonicalIP(s.Address)
	up, listed := h.up[addr]
	s.HealthKnown, s.Healthy, s.Lags, s.Probed, s.ProbedAt, s.UpAt = true, up, true, listed, h.asked, h.upAt[addr]
}

// due reports whether a read of the rule should begin at now: maxAge after
// the last one began (not after its answer: reads overlap where the
// operation is slower than maxAge), fewer than maxHealthReads running, and
// maxAge after a failure.
func (h *ruleHealth) due(now time.Time, maxAge time.Duration) bool {
	return h.reading < maxHealthReads && now.Sub(h.begun) >= maxAge && now.Sub(h.failedAt) >= maxAge
}

// newer reports whether the answer of a read begun at asked is newer than
// the one kept (reads overlap: one begun earlier may end later).
func (h *ruleHealth) newer(asked time.Time) bool {
	return h.at.IsZero() || asked.After(h.asked)
}

// forget drops the entries of rules not asked about for healthForget, at
// most once a minute (a scan of the cache). An entry being refreshed stays:
// its read holds it and writes into it. p.mu is held.
func (s *healthState) forget(now time.Time) {
	if now.Sub(s.pruned) < time.Minute {
		return
	}
	s.pruned = now
	for k, h := range s.rules {
		if h.reading == 0 && now.Sub(h.used) >= healthForget {
			delete(s.rules, k)
		}
	}
}

// refreshRuleHealth asks ARM for a rule's health and keeps the answer,
// unless a read begun later answered first; asked is when the read began
// (fillHealthFor's clock: no later than its POST).
func (p *Provider) refreshRuleHealth(key, rule string, h *ruleHealth, asked time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.HealthTimeout)
	defer cancel()
	up, refused, err := p.readRuleHealth(ctx, key, rule)
	p.mu.Lock()
	defer p.mu.Unlock()
	h.reading--
	if !h.newer(asked) {
		return // a read begun later has answered already: this one is older news
	}
	if err == nil {
		h.up, h.at, h.asked, h.failures = up, time.Now(), asked, 0
		if h.upAt == nil {
			h.upAt = map[string]time.Time{}
		}
		for a, ok := range up {
			if ok {
				h.upAt[a] = asked
			}
		}
		for a := range h.upAt {
			if _, listed := up[a]; !listed {
				delete(h.upAt, a) // gone from the pool: a later Up is a new backend's
			}
		}
		return
	}
	h.failures++
	h.failedAt = time.Now()
	if refused || h.failures >= healthFailures {
		h.off, h.failures = time.Now().Add(healthOff), 0
		p.opts.Log.Info("rule health unavailable; the gates read pool membership only for a while",
			"loadBalancer", key, "rule", rule, "for", healthOff, "error", err.Error())
	}
}

// readRuleHealth runs the rule-health operation: each address of the
// rule's pool, and whether its probe is Up. refused: ARM refused to start
// it (refusedStatus); a failure after it started is only a failure.
func (p *Provider) readRuleHealth(ctx context.Context, key, rule string) (up map[string]bool, refused bool, err error) {
	p.opts.Hooks.OnRead("rule-health")
	poller, err := p.rules.BeginHealth(ctx, p.opts.ResourceGroup, key, rule, nil)
	if err != nil {
		var re *azcore.ResponseError
		return nil, errors.As(err, &re) && refusedStatus(re.StatusCode), err
	}
	res, err := poller.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: p.opts.PollFrequency})
	if err != nil {
		return nil, false, err
	}
	up = map[string]bool{}
	for _, a := range res.LoadBalancerBackendAddresses {
		if addr := p.healthAddress(a); addr != "" {
			up[addr] = a.State != nil && *a.State == "Up"
		}
	}
	return up, false, nil
}

// healthAddress is the address a rule-health entry is about. An entry of
// a NIC-based pool names its member's ipconfig
// (networkInterfaceIPConfigurationId, LoadBalancerHealthPerRulePerBackendAddress
// in the REST reference above): that ipconfig's address as the NIC lists
// read it (nicpools.go) is the one the pool was reported with, so it is
// used when known; else the entry's ipAddress, as for nodeIP pools. "":
// neither.
func (p *Provider) healthAddress(a *armnetwork.LoadBalancerHealthPerRulePerBackendAddress) string {
	if a == nil {
		return ""
	}
	if a.NetworkInterfaceIPConfigurationID != nil {
		if addr := p.cachedIPConfig(*a.NetworkInterfaceIPConfigurationID); addr != "" {
			return addr
		}
	}
	if a.IPAddress != nil {
		return model.CanonicalIP(*a.IPAddress)
	}
	return ""
}

// refusedStatus: the answers to the operation's POST that say this cloud
// or API version does not offer it.
func refusedStatus(code int) bool {
	return code == http.StatusBadRequest || code == http.StatusNotFound || code == http.StatusMethodNotAllowed ||
		code == http.StatusNotImplemented
}
