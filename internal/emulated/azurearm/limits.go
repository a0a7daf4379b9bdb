package azurearm

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// Azure's published limits, each enforced only when Options asks for it
// (Options.Limits, Options.Throttle): without them the emulator answers as
// it always has, so figures measured before they existed stay comparable.

// LBLimits are the most children one load balancer may have; a zero field
// is not enforced.
type LBLimits struct {
	// Frontends is the most frontend IP configurations.
	Frontends int
	// Rules is the most rules, load-balancing and inbound NAT rules
	// together.
	Rules int
}

// StandardLBLimits are a Standard Load Balancer's: 600 frontend IP
// configurations and 1,500 rules (load-balancing and inbound NAT) per load
// balancer, https://learn.microsoft.com/en-us/azure/azure-resource-manager/management/azure-subscription-service-limits#load-balancer
var StandardLBLimits = LBLimits{Frontends: 600, Rules: 1500}

// checkLimits refuses a load balancer document with more children than the
// limits allow, as ARM refuses the whole PUT with a 400. The exact error
// codes ARM sends for these two limits were not found in Azure's public
// documentation; these follow the network resource provider's documented
// pattern for the inbound NAT rule limit ("LoadBalancerInboundRuleCountLimitExceededByVMScaleSet":
// "The requested number of inbound rules 152 on load balancer … will exceed
// the maximum number of inbound rules allowed 150.", quoted in
// Azure/azure-quickstart-templates#2515). Clients should act on the status.
func checkLimits(l LBLimits, id string, p *armnetwork.LoadBalancerPropertiesFormat) *apiError {
	if p == nil {
		return nil
	}
	if n := len(p.FrontendIPConfigurations); l.Frontends > 0 && n > l.Frontends {
		return badRequest("LoadBalancerFrontendIPConfigurationCountLimitExceeded: The requested number of frontend IP configurations %d on load balancer %s will exceed the maximum number of frontend IP configurations allowed %d.",
			n, id, l.Frontends)
	}
	if n := len(p.LoadBalancingRules) + len(p.InboundNatRules); l.Rules > 0 && n > l.Rules {
		return badRequest("LoadBalancerRuleCountLimitExceeded: The requested number of rules %d (load-balancing and inbound NAT) on load balancer %s will exceed the maximum number of rules allowed %d.",
			n, id, l.Rules)
	}
	return nil
}

// Bucket is a token bucket: Size requests at once, refilled at Refill a
// second. A zero Size is not enforced.
type Bucket struct {
	Size   int
	Refill float64
}

// Throttle is ARM's request throttling: a bucket per subscription,
// principal and kind of operation (reads are GETs, deletes DELETEs, writes
// every other method: PUT, PATCH and POST, the rule-health operation too).
// ARM's page does not say which bucket a POST takes; the emulator takes the
// writes', the smaller, so a client it does not throttle ARM would not.
type Throttle struct {
	Reads, Writes, Deletes Bucket
}

// ARMThrottle is Azure Resource Manager's since 2024: per region,
// subscription and principal, reads 250 at once refilled at 25 a second,
// writes and deletes 200 refilled at 10,
// https://learn.microsoft.com/en-us/azure/azure-resource-manager/management/request-limits-and-throttling
var ARMThrottle = Throttle{Reads: Bucket{250, 25}, Writes: Bucket{200, 10}, Deletes: Bucket{200, 10}}

// bucketState is one bucket's tokens at a moment.
type bucketState struct {
	tokens float64
	at     time.Time
}

// opKind names a request's bucket, as ARM's remaining-requests headers do.
func opKind(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		return "reads"
	case http.MethodDelete:
		return "deletes"
	}
	return "writes"
}

// throttle takes a token from the bucket of req's subscription, principal
// and kind. It returns the 429 ARM answers when the bucket is empty, with
// Retry-After (whole seconds until a token is back); otherwise the header
// that tells the client how many requests it has left, for the answer (""
// when throttling is off).
func (e *Emulator) throttle(req *http.Request, t target) (*reply, string, int) {
	kind := opKind(req.Method)
	var b Bucket
	switch kind {
	case "reads":
		b = e.opts.Throttle.Reads
	case "deletes":
		b = e.opts.Throttle.Deletes
	default:
		b = e.opts.Throttle.Writes
	}
	if b.Size <= 0 {
		return nil, "", 0
	}
	who := clientOf(req)
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.buckets == nil {
		e.buckets = map[string]*bucketState{}
	}
	key := t.sub + "\x00" + who + "\x00" + kind
	s := e.buckets[key]
	if s == nil {
		s = &bucketState{tokens: float64(b.Size), at: now}
		e.buckets[key] = s
	}
	s.tokens = math.Min(float64(b.Size), s.tokens+now.Sub(s.at).Seconds()*b.Refill)
	s.at = now
	header := "X-Ms-Ratelimit-Remaining-Subscription-" + kind
	if s.tokens >= 1 {
		s.tokens--
		return nil, header, int(s.tokens)
	}
	e.counters.Throttled++
	after := 1
	if b.Refill > 0 {
		after = max(1, int(math.Ceil((1-s.tokens)/b.Refill)))
	}
	// ARM's message names the operation kind, subscription and principal,
	// and the wait (SubscriptionRequestsThrottled, status 429).
	rep := errorReply(http.StatusTooManyRequests, "SubscriptionRequestsThrottled",
		"Number of '"+kind[:len(kind)-1]+"' requests for subscription '"+t.sub+"' actor '"+who+
			"' exceeded. Please try again after '"+strconv.Itoa(after)+"' seconds after the last request.")
	rep.header.Set("Retry-After", strconv.Itoa(after))
	rep.header.Set(header, "0")
	return rep, "", 0
}
