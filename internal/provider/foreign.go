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
	// ByInstance: each backend's Address is the cloud's ID of a node (an
	// EC2 instance ID: AWS instance targets), the last segment of that
	// Node's spec.providerID, not an address; the reader of the rule
	// (lbtarget) puts the node's address in its place.
	ByInstance bool
}

// ForeignHostReader is implemented by providers whose foreign load
// balancers report a DNS name in the Service's status, not an address
// (AWS's Network Load Balancers, as cloud-provider-aws writes them): the
// gates of a gate-only Service with a hostname ingress read it through
// this. Like ForeignReader it has no write.
type ForeignHostReader interface {
	// ForeignRuleByHost finds the rule (an NLB listener and its target
	// group) serving port over proto for svc, whose ingress hostname is
	// svc.Hostname; nil, nil when none is found.
	ForeignRuleByHost(ctx context.Context, svc ForeignService, port int32, proto model.Protocol) (*ForeignRule, error)
}

// ForeignService is what a ForeignHostReader knows of a Service: the
// other controller names and tags its load balancer after these (the
// Service's UID, namespace/name), and the hostname it reported.
type ForeignService struct {
	Namespace, Name, UID string
	Hostname             string
}
