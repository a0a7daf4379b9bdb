package aws

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// The defaults of Options.
const (
	// DefaultQPS and DefaultBurst are the provider's whole budget of
	// Describe calls. ELBv2 meters Describe* per account and region (a
	// bucket of 40 refilled at 10 a second, the figures this project works
	// with), shared with the cloud-controller-manager, whose sync of one
	// NLB makes some ten Describes, and with every other client there: the
	// gates take a fifth of the refill and an eighth of the bucket, and
	// leave the rest to them.
	DefaultQPS   = 2.0
	DefaultBurst = 5
	// DefaultHealthMaxAge is how old a target group's health answer may be
	// before a gate that asks reads it again: half the shortest interval
	// cloud-provider-aws gives a health check (10 s, Local), so a state
	// change is seen within one interval of the NLB's.
	DefaultHealthMaxAge = 5 * time.Second
	// DefaultLookupMaxAge is how old what was found of a Service's NLB
	// (the load balancer, its listeners and target groups: four calls) may
	// be before it is looked up again. The CCM changes them rarely: a new
	// port, or a new target group when a health check's protocol or
	// interval changes.
	DefaultLookupMaxAge = 30 * time.Second
	// DefaultPropagation is how long after a target's state changes the
	// NLB's data plane may still act on the old one: 30-40 s from
	// unhealthy to no new connections in aws/containers-roadmap#470, a
	// field report; AWS documents no figure.
	DefaultPropagation = 35 * time.Second
	// DefaultReadTimeout bounds one call; a read shared by several gates
	// runs on its own context, not on the caller's.
	DefaultReadTimeout = 30 * time.Second
)

// Tags cloud-provider-aws (v1.37.1, aws.go:86 and tags.go:38) puts on the
// NLB, its listeners and target groups.
const (
	TagServiceName   = "kubernetes.io/service-name"
	TagClusterPrefix = "kubernetes.io/cluster/"
)

// Options configure a Provider.
type Options struct {
	// API is the ELBv2 client, seen through its Describe operations only.
	API API
	// ClusterID, when set, is required as the NLB's cluster tag
	// (kubernetes.io/cluster/<ClusterID>, as the CCM's --cluster-name or
	// KubernetesClusterID tags it): an NLB of another cluster with the
	// Service's name is not read.
	ClusterID string
	// QPS and Burst bound every call the provider makes (DefaultQPS,
	// DefaultBurst).
	QPS   float64
	Burst int
	// HealthMaxAge, LookupMaxAge, Propagation and ReadTimeout: see their
	// Default constants.
	HealthMaxAge, LookupMaxAge, Propagation, ReadTimeout time.Duration
	Hooks                                                provider.Hooks
	Log                                                  logr.Logger
}

// Provider reads the CCM's NLBs for the gates. As a provider.Provider (the
// Service controller's, for Services of its class) it refuses every write:
// zerodrop writes no load balancer on AWS.
type Provider struct {
	opts    Options
	limiter *rate.Limiter

	mu      sync.Mutex
	lookups map[string]*lookup   // by Service UID
	health  map[string]*tgHealth // by target group ARN
	pruned  time.Time
	// flights joins concurrent reads of one thing into one call.
	flights singleflight.Group
}

// New returns a provider; it calls nothing yet.
func New(opts Options) (*Provider, error) {
	if opts.API == nil {
		return nil, errors.New("aws: no ELBv2 client")
	}
	if opts.QPS == 0 {
		opts.QPS = DefaultQPS
	}
	if opts.Burst == 0 {
		opts.Burst = DefaultBurst
	}
	if opts.HealthMaxAge == 0 {
		opts.HealthMaxAge = DefaultHealthMaxAge
	}
	if opts.LookupMaxAge == 0 {
		opts.LookupMaxAge = DefaultLookupMaxAge
	}
	if opts.Propagation == 0 {
		opts.Propagation = DefaultPropagation
	}
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout = DefaultReadTimeout
	}
	if opts.QPS < 0 || opts.Burst < 0 || opts.HealthMaxAge < 0 || opts.LookupMaxAge < 0 || opts.Propagation < 0 || opts.ReadTimeout < 0 {
		return nil, fmt.Errorf("aws: negative option in %+v", opts)
	}
	return &Provider{opts: opts, limiter: rate.NewLimiter(rate.Limit(opts.QPS), opts.Burst),
		lookups: map[string]*lookup{}, health: map[string]*tgHealth{}}, nil
}

var (
	_ provider.Provider          = (*Provider)(nil)
	_ provider.ForeignReader     = (*Provider)(nil)
	_ provider.ForeignHostReader = (*Provider)(nil)
)

// ErrNoWrites is what every write of the provider answers.
var ErrNoWrites = errors.New("zerodrop writes no load balancer on AWS: leave the Service to cloud-provider-aws and annotate it " +
	model.AnnotationGateOnly + "=true for the gates")

// Name implements provider.Provider.
func (p *Provider) Name() string { return "aws" }

// Unsupported implements provider.Provider: nothing is balanced here.
func (p *Provider) Unsupported() map[model.Protocol]bool { return nil }

// Observe implements provider.Provider: zerodrop holds no load balancer on
// AWS.
func (p *Provider) Observe(context.Context, string) (*model.LoadBalancer, error) { return nil, nil }

// Apply implements provider.Provider: refused (ErrNoWrites).
func (p *Provider) Apply(context.Context, model.Plan) error {
	return fmt.Errorf("%w (%w)", ErrNoWrites, provider.ErrRefused)
}

// Delete implements provider.Provider: nothing to delete.
func (p *Provider) Delete(context.Context, string) error { return nil }

// Backends implements provider.Provider: none of zerodrop's.
func (p *Provider) Backends(context.Context, string) ([]provider.BackendStatus, error) {
	return nil, nil
}

// ValidateService refuses every Service given to zerodrop's class on AWS
// (a Warning Event and ConfigValid=False say why), before anything is
// planned.
func (p *Provider) ValidateService(*corev1.Service) error { return ErrNoWrites }

// ForeignRule implements provider.ForeignReader: the CCM's NLBs report a
// hostname, never an address, so an address finds nothing here.
func (p *Provider) ForeignRule(context.Context, string, int32, model.Protocol) (*provider.ForeignRule, error) {
	return nil, nil
}

// ForeignRuleByHost implements provider.ForeignHostReader: the listener
// of svc's NLB on port and proto, its target group, and what the last
// health answer of that group says of its targets (verdict.go).
func (p *Provider) ForeignRuleByHost(ctx context.Context, svc provider.ForeignService, port int32, proto model.Protocol) (*provider.ForeignRule, error) {
	lk, err := p.lookup(ctx, svc)
	if err != nil || lk == nil {
		return nil, err
	}
	l := lk.listener(port, proto)
	if l == nil {
		return nil, nil
	}
	tg := lk.groups[l.targetGroup]
	answer, since, asked, err := p.targetHealth(ctx, l.targetGroup)
	if err != nil {
		return nil, fmt.Errorf("target health of %s (NLB %s, port %d): %w", tg.name, lk.name, port, err)
	}
	listener := lk.name + "/" + l.name
	return &provider.ForeignRule{LB: lk.name, Rule: l.name, Probe: tg.probe, ByInstance: true,
		// A deregistered target (draining) still gets new connections for
		// the propagation time.
		Settle:   p.opts.Propagation,
		Backends: statuses(listener, answer, since, asked, time.Now(), p.opts.Propagation)}, nil
}

// wait spends one call of the budget.
func (p *Provider) wait(ctx context.Context, op string) error {
	if err := p.limiter.Wait(ctx); err != nil {
		return fmt.Errorf("%s: waiting for the request budget: %w", op, err)
	}
	p.opts.Hooks.OnRead(op)
	return nil
}
