// Package azure is zerodrop's provider for Azure Standard Load Balancers,
// through the Azure SDK for Go (armnetwork). Many Services share one load
// balancer; the controller keys its work queue by load balancer name
// (Provider.KeyFunc), so every write to one load balancer comes from one work
// item (invariant 2). Observe reads a load balancer with one GET; Apply
// writes with If-Match on the ETag the plan was computed against, so a
// concurrent writer turns into provider.ErrConflict instead of a lost update;
// a plan that changes backends of one pool is one pool PUT, anything else one
// load balancer PUT. See docs/azure.md for the mapping.
package azure

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/go-logr/logr"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

var _ provider.Provider = (*Provider)(nil)

// Options configure the provider. SubscriptionID, ResourceGroup,
// LoadBalancers and SubnetID are required.
type Options struct {
	SubscriptionID string
	ResourceGroup  string
	// LoadBalancers are the names of the load balancers zerodrop may use;
	// KeyFunc places every Service on one of them.
	LoadBalancers []string
	// SubnetID is the subnet frontends take their private addresses from
	// (…/virtualNetworks/<vnet>/subnets/<subnet>); IP-based backend pools
	// reference its virtual network.
	SubnetID string
	// Location is where zerodrop creates a load balancer that does not exist.
	Location string
	// Owner is the value of TagOwner on the load balancers zerodrop writes
	// (default "zerodrop"); give each cluster its own.
	Owner string
	// Credential authenticates; nil uses azidentity's DefaultAzureCredential
	// (environment, workload identity, managed identity, Azure CLI).
	Credential azcore.TokenCredential
	// ClientOptions configure the SDK pipeline (transport, cloud, retries).
	// Unless Retry.StatusCodes is set, 429 is not retried inside the SDK: the
	// provider hands it to the work queue as a provider.RetryAfterError.
	ClientOptions *arm.ClientOptions
	Hooks         provider.Hooks
	Log           logr.Logger
	// PollFrequency is how often a long-running operation is polled when
	// ARM sends no Retry-After, and the most often it is polled when ARM asks
	// for less (pollfloor.go; default 1s; the SDK allows less only in tests).
	PollFrequency time.Duration
	// TryTimeout bounds each try of every ARM request, each poll of a
	// long-running operation included (the SDK's per-try timeout,
	// policy.RetryOptions.TryTimeout; default: ClientOptions.Retry.TryTimeout
	// when set, else DefaultTryTimeout). A try that has not answered by then
	// is cancelled and retried like a failed connection, up to the SDK's
	// MaxRetries (default 3), so a hung connection fails the call instead of
	// blocking the load balancer's work item.
	TryTimeout time.Duration
	// PollTimeout bounds the wait for a write ARM has accepted, from ARM's
	// answer accepting it to its end (default DefaultPollTimeout). It is separate from, and
	// should be much longer than, TryTimeout: an operation takes many polls,
	// each bounded by TryTimeout. When it passes the call fails; the write
	// may still complete in Azure, and the next Observe reads what it did.
	PollTimeout time.Duration
	// DefaultRetryAfter is the wait for a 429 without Retry-After (default 10s).
	DefaultRetryAfter time.Duration
	// BackendsMaxAge is how old a document Backends may answer from (default
	// 1s). The gates poll Backends on every replica; a standby never
	// observes, so without a bound it would answer from its start-up read.
	BackendsMaxAge time.Duration
	// RuleHealth makes Backends report each address's probe health as ARM's
	// rule-health operation answers it (health.go); a rule's read begins
	// at most once per HealthMaxAge (default DefaultHealthMaxAge), counted
	// from the last read's beginning (reads overlap where ARM is slower),
	// and reads are asked at most HealthQPS a second, HealthBurst at once (defaults DefaultHealthQPS,
	// DefaultHealthBurst), each read bounded by HealthTimeout (default
	// DefaultHealthTimeout). Off: HealthKnown is false.
	RuleHealth    bool
	HealthMaxAge  time.Duration
	HealthQPS     float64
	HealthBurst   int
	HealthTimeout time.Duration
	// GateOnlyLoadBalancers are load balancers in ResourceGroup that another
	// controller writes (the cloud-controller-manager's), which the gates of
	// gate-only Services read and zerodrop never writes (foreign.go). They
	// may include one of LoadBalancers: zerodrop's children on a load
	// balancer it shares are written as ever, the others only read.
	GateOnlyLoadBalancers []string
	// ReadQPS and ReadBurst are the budget of every ARM GET the provider
	// causes, the SDK's polls and final GETs included (budget.go; defaults
	// DefaultReadQPS, DefaultReadBurst).
	ReadQPS   float64
	ReadBurst int
	// MaxFrontends and MaxRules are the most frontend IP configurations
	// and rules (load-balancing and inbound NAT) one load balancer may
	// have (defaults DefaultMaxFrontends and DefaultMaxRules, a Standard
	// Load Balancer's limits); a Service that would take its load balancer
	// past either is refused alone (capacity.go). Lower only in tests.
	MaxFrontends, MaxRules int
}

// The defaults of Options.TryTimeout and Options.PollTimeout.
const (
	DefaultTryTimeout  = 30 * time.Second
	DefaultPollTimeout = 5 * time.Minute
)

// Provider drives Azure load balancers. It is safe for concurrent use on
// different keys; the controller calls it for one key from one work item.
type Provider struct {
	opts       Options
	lbs        *armnetwork.LoadBalancersClient
	pools      *armnetwork.LoadBalancerBackendAddressPoolsClient
	rules      *armnetwork.LoadBalancerLoadBalancingRulesClient
	nics       *armnetwork.InterfacesClient
	vnetID     string
	configured map[string]bool

	mu sync.Mutex
	// observed holds the document of each load balancer's last Observe, so
	// that Apply can write the plan against exactly what it was computed from.
	observed map[string]*armnetwork.LoadBalancer
	readAt   map[string]time.Time
	// settled holds the last document read of each load balancer in
	// provisioningState Succeeded, what the gates read (applied.go).
	settled map[string]*armnetwork.LoadBalancer
	// placed records, per Service, the load balancers that have its frontend.
	placed map[string]map[string]bool
	// health is what rule health is known (health.go).
	health *healthState
	// ipconfigs are the addresses of NIC-based pools' members (nicpools.go).
	ipconfigs ipconfigCache
}

// New creates the provider and reads every configured load balancer once, so
// that KeyFunc knows where each Service already is before the controller's
// informers start.
func New(ctx context.Context, opts Options) (*Provider, error) {
	if opts.SubscriptionID == "" || opts.ResourceGroup == "" || len(opts.LoadBalancers) == 0 {
		return nil, errors.New("azure: SubscriptionID, ResourceGroup and LoadBalancers are required")
	}
	vnet, _, ok := strings.Cut(opts.SubnetID, "/subnets/")
	if !ok || !strings.Contains(strings.ToLower(vnet), "/virtualnetworks/") {
		return nil, fmt.Errorf("azure: SubnetID %q is not a subnet resource ID", opts.SubnetID)
	}
	if opts.Owner == "" {
		opts.Owner = "zerodrop"
	}
	if opts.PollFrequency <= 0 {
		opts.PollFrequency = time.Second
	}
	if opts.PollTimeout <= 0 {
		opts.PollTimeout = DefaultPollTimeout
	}
	if opts.DefaultRetryAfter <= 0 {
		opts.DefaultRetryAfter = 10 * time.Second
	}
	if opts.BackendsMaxAge <= 0 {
		opts.BackendsMaxAge = time.Second
	}
	if opts.HealthMaxAge <= 0 {
		opts.HealthMaxAge = DefaultHealthMaxAge
	}
	if opts.HealthQPS <= 0 {
		opts.HealthQPS = DefaultHealthQPS
	}
	if opts.HealthBurst <= 0 {
		opts.HealthBurst = DefaultHealthBurst
	}
	if opts.HealthTimeout <= 0 {
		opts.HealthTimeout = DefaultHealthTimeout
	}
	if opts.ReadQPS <= 0 {
		opts.ReadQPS = DefaultReadQPS
	}
	if opts.ReadBurst <= 0 {
		opts.ReadBurst = DefaultReadBurst
	}
	if opts.MaxFrontends <= 0 {
		opts.MaxFrontends = DefaultMaxFrontends
	}
	if opts.MaxRules <= 0 {
		opts.MaxRules = DefaultMaxRules
	}
	if opts.Credential == nil {
		cred, err := azidentity.NewDefaultAzureCredential(nil)
		if err != nil {
			return nil, fmt.Errorf("azure: credential: %w", err)
		}
		opts.Credential = cred
	}
	copts := opts.ClientOptions.Clone()
	if copts == nil {
		copts = &arm.ClientOptions{}
	}
	if copts.Retry.StatusCodes == nil {
		// As the SDK's defaults, minus 429: throttling goes back to the queue.
		copts.Retry.StatusCodes = []int{http.StatusRequestTimeout, http.StatusInternalServerError,
			http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout}
	}
	switch {
	case opts.TryTimeout > 0:
		copts.Retry.TryTimeout = opts.TryTimeout
	case copts.Retry.TryTimeout <= 0:
		copts.Retry.TryTimeout = DefaultTryTimeout
	}
	opts.TryTimeout = copts.Retry.TryTimeout
	reads := newReadBudget(opts.ReadQPS, opts.ReadBurst)
	copts.PerCallPolicies = append(slices.Clone(copts.PerCallPolicies), reads.perCall(), pollFloor(opts.PollFrequency))
	copts.PerRetryPolicies = append(slices.Clone(copts.PerRetryPolicies), reads.perTry())
	factory, err := armnetwork.NewClientFactory(opts.SubscriptionID, opts.Credential, copts)
	if err != nil {
		return nil, fmt.Errorf("azure: clients: %w", err)
	}
	p := &Provider{
		opts:       opts,
		lbs:        factory.NewLoadBalancersClient(),
		pools:      factory.NewLoadBalancerBackendAddressPoolsClient(),
		rules:      factory.NewLoadBalancerLoadBalancingRulesClient(),
		nics:       factory.NewInterfacesClient(),
		ipconfigs:  newIPConfigCache(),
		health:     newHealthState(opts),
		vnetID:     vnet,
		configured: map[string]bool{},
		observed:   map[string]*armnetwork.LoadBalancer{},
		readAt:     map[string]time.Time{},
		settled:    map[string]*armnetwork.LoadBalancer{},
		placed:     map[string]map[string]bool{},
	}
	for _, name := range opts.LoadBalancers {
		p.configured[name] = true
	}
	for _, name := range opts.LoadBalancers {
		raw, err := p.initialRead(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("azure: initial read: %w", err)
		}
		p.remember(name, raw)
	}
	// The gate-only load balancers are read once too, so that a missing
	// permission fails at start; one that does not exist yet (the other
	// controller creates it with its first Service) is no error.
	for _, name := range opts.GateOnlyLoadBalancers {
		if p.configured[name] {
			continue
		}
		raw, err := p.initialRead(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("azure: initial read of gate-only load balancer: %w", err)
		}
		p.remember(name, raw)
	}
	return p, nil
}

// initialRead reads a load balancer at start, waiting out throttling: a
// controller that exits on a 429 would only restart into the next one.
func (p *Provider) initialRead(ctx context.Context, name string) (*armnetwork.LoadBalancer, error) {
	for attempt := 1; ; attempt++ {
		raw, err := p.get(ctx, name)
		var retry *provider.RetryAfterError
		if !errors.As(err, &retry) || attempt == 5 {
			return raw, err
		}
		select {
		case <-time.After(retry.After):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return "azure" }

// Unsupported implements provider.Provider: Azure balances TCP and UDP.
func (p *Provider) Unsupported() map[model.Protocol]bool {
	return map[model.Protocol]bool{model.SCTP: true}
}

// Observe implements provider.Provider with one GET of the load balancer; it
// returns every zerodrop listener on it, whichever Service it belongs to.
func (p *Provider) Observe(ctx context.Context, key string) (*model.LoadBalancer, error) {
	if !p.configured[key] {
		return nil, fmt.Errorf("observe %s: %w", key, ErrNotConfigured)
	}
	raw, err := p.get(ctx, key)
	if err != nil {
		return nil, err
	}
	p.remember(key, raw)
	if raw == nil {
		return nil, nil
	}
	if err := p.checkOwner(key, raw); err != nil {
		return nil, err
	}
	return toModel(key, raw), nil
}

// Apply implements provider.Provider. Only listener creates, updates and
// deletes need the whole load balancer written; a plan that changes the
// backends of one pool writes that pool only.
func (p *Provider) Apply(ctx context.Context, plan model.Plan) error {
	if plan.Empty() {
		return nil
	}
	key := plan.Key
	if !p.configured[key] {
		return fmt.Errorf("apply to %s: %w", key, ErrNotConfigured)
	}
	raw, err := p.base(ctx, plan)
	if err != nil {
		return err
	}
	var obs *model.LoadBalancer
	if raw != nil {
		if err := p.checkOwner(key, raw); err != nil {
			return err
		}
		obs = toModel(key, raw)
	}
	next, err := model.Apply(obs, plan)
	if err != nil {
		return fmt.Errorf("apply to %s: %w", key, err)
	}
	defer p.forget(key)
	if pool, ok, err := p.poolOnly(key, raw, next, plan); err != nil {
		return err
	} else if ok {
		return p.putPool(ctx, key, pool)
	}
	lb, err := p.render(key, raw, next)
	if err != nil {
		return err
	}
	return p.putLB(ctx, key, lb, raw)
}

// base returns the document plan was computed from, or ErrConflict when
// the load balancer has changed (or appeared, or gone) since.
func (p *Provider) base(ctx context.Context, plan model.Plan) (*armnetwork.LoadBalancer, error) {
	if plan.Create {
		// If-None-Match: * makes the create fail if it exists by now.
		return nil, nil
	}
	p.mu.Lock()
	raw := p.observed[plan.Key]
	p.mu.Unlock()
	if raw == nil || str(raw.Etag) != plan.Version {
		var err error
		if raw, err = p.get(ctx, plan.Key); err != nil {
			return nil, err
		}
	}
	if raw == nil || str(raw.Etag) != plan.Version {
		return nil, fmt.Errorf("apply to %s: version %s is gone: %w", plan.Key, plan.Version, provider.ErrConflict)
	}
	return raw, nil
}

// Delete implements provider.Provider: zerodrop's children go; the load
// balancer itself goes too when zerodrop created it and nothing else is on it.
func (p *Provider) Delete(ctx context.Context, key string) error {
	if !p.configured[key] {
		return fmt.Errorf("delete %s: %w", key, ErrNotConfigured)
	}
	raw, err := p.get(ctx, key)
	if err != nil || raw == nil {
		return err
	}
	defer p.forget(key)
	if err := p.checkOwner(key, raw); err != nil {
		return err
	}
	rest, err := p.render(key, raw, &model.LoadBalancer{Key: key})
	if err != nil {
		return err
	}
	if raw.Tags[TagCreated] != nil && empty(rest) {
		return p.deleteLB(ctx, key, str(raw.Etag))
	}
	if raw.Tags[TagCreated] == nil {
		delete(rest.Tags, TagOwner)
	}
	return p.putLB(ctx, key, rest, raw)
}

// Backends implements provider.Provider. ARM reports no connection counts,
// so Connections is -1: a draining backend is removed when its drain
// timeout passes. Health comes from the rule-health operation with
// Options.RuleHealth (health.go); without it HealthKnown is false. What ARM does
// report (the admin states) comes from the last document read, Observe's or
// Backends' own, when it is younger than Options.BackendsMaxAge — or, while
// that one shows a write not yet applied, the last one that was applied
// (applied.go); otherwise
// (after a write, or on a standby that never observes) it is read again, so
// the gates poll ARM at most once per max age and load balancer.
func (p *Provider) Backends(ctx context.Context, key string) ([]provider.BackendStatus, error) {
	raw := p.fresh(key)
	if raw == nil {
		var err error
		if raw, err = p.get(ctx, key); err != nil {
			return nil, err
		}
		p.remember(key, raw)
		if raw == nil {
			return nil, nil
		}
	}
	raw, err := p.applied(key, raw)
	if err != nil {
		return nil, err
	}
	var out []provider.BackendStatus
	for _, l := range toModel(key, raw).Listeners {
		for _, b := range l.Backends {
			out = append(out, provider.BackendStatus{Listener: l.Name, Address: b.Address, Port: b.Port,
				State: b.State, Connections: -1})
		}
	}
	p.withRuleHealth(ctx, key, out)
	return out, nil
}

// fresh is the last document read of key if it is younger than
// BackendsMaxAge.
func (p *Provider) fresh(key string) *armnetwork.LoadBalancer {
	p.mu.Lock()
	defer p.mu.Unlock()
	if raw := p.observed[key]; raw != nil && time.Since(p.readAt[key]) < p.opts.BackendsMaxAge {
		return raw
	}
	return nil
}

func (p *Provider) checkOwner(key string, raw *armnetwork.LoadBalancer) error {
	if o := raw.Tags[TagOwner]; o != nil && *o != p.opts.Owner {
		return fmt.Errorf("load balancer %s (%s=%s): %w", key, TagOwner, *o, ErrNotOwned)
	}
	return nil
}

// remember keeps the document for Apply and notes where Services are.
func (p *Provider) remember(key string, raw *armnetwork.LoadBalancer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if raw == nil {
		delete(p.observed, key)
		delete(p.settled, key)
	} else {
		p.observed[key], p.readAt[key] = raw, time.Now()
		if settledState(raw) {
			p.settled[key] = raw
		}
	}
	for svc, lbs := range p.placed {
		delete(lbs, key)
		if len(lbs) == 0 {
			delete(p.placed, svc)
		}
	}
	for _, svc := range servicesOn(raw) {
		if p.placed[svc] == nil {
			p.placed[svc] = map[string]bool{}
		}
		p.placed[svc][key] = true
	}
}

// forget drops the document after a write: the next Observe reads anew.
func (p *Provider) forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.observed, key)
}

func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
