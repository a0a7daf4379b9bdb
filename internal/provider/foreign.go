package provider

import (
	"context"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
)

// ForeignReader is implemented by providers that can read, and only read,
// load balancers another controller writes (on Azure the cloud's own
// cloud-controller-manager): the gates of a gate-only Service
// (model.AnnotationGateOnly) read its load balancer through it. It has no
// write on purpose: zerodrop never writes those load balancers.
type ForeignReader interface {
	// ForeignRule finds the rule that serves frontend address:port over
	// proto, by that frontend and never by a name the other controller
	// chose; nil, nil when none of the load balancers it may read has one.
	ForeignRule(ctx context.Context, frontend string, port int32, proto model.Protocol) (*ForeignRule, error)
}

// ForeignRule is what the provider reads of another controller's rule.
type ForeignRule struct {
	LB   string
	Rule string
	// FloatingIP: the backends receive the frontend's address as the
	// destination (the cloud-controller-manager's rules have it).
	FloatingIP bool
	// Probe is the rule's probe as the cloud runs it.
	Probe model.Probe
	// Settle is how long the data plane may take to act on a change of the
	// pool after the provider reports it applied (two probe intervals).
	Settle time.Duration
	// Backends are the addresses of the rule's pools, from the last state
	// the provider reports applied, with their probe health where known.
	// Listener is "<LB>/<Rule>".
	Backends []BackendStatus
}
