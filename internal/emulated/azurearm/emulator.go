// Package emulator is a stateful, in-memory Azure Resource Manager for the
// load balancer APIs a Kubernetes load-balancer controller uses, served over
// HTTP(S) with ARM's wire protocol (server.go): zerodrop's provider and the
// real cloud-provider-azure are its clients. It keeps load balancers as ARM
// documents and gives them real ETag semantics — a new ETag on every write,
// shared by the load balancer and its children as the network resource
// provider does, 412 on an If-Match or If-None-Match mismatch — long-running
// operations polled through Azure-AsyncOperation (lro.go), the cloud's
// metadata and token endpoints (identity.go), a record of every call with
// what each write changed (record.go), request counters, and fault injection
// (412, 429 with Retry-After, 500, slow operations) at configurable rates
// from a fixed seed. It is for tests and the lab only.
package azurearm

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// Options configure an Emulator. Zero values get defaults.
type Options struct {
	// AddressPrefix is where frontend private addresses come from (default
	// 127.240.0.0/16: loopback, so a lab can serve them).
	AddressPrefix netip.Prefix
	// PollSteps is how many "in progress" answers a long-running operation
	// gives before it completes (default 1).
	PollSteps int
	// PublicPrefix is where public IP addresses come from (default
	// 203.0.113.0/24, TEST-NET-3: reserved for documentation, routed
	// nowhere, and still global unicast, which cloud-provider-azure requires
	// of a public Service's address, pkg/provider/azure_publicip_repo.go).
	PublicPrefix netip.Prefix
	// Location is the emulator's one region (default westeurope).
	Location string
	// PollRetryAfter is the Retry-After of an operation in progress
	// (default 10ms; ARM's network provider sends 10 s).
	PollRetryAfter time.Duration
	// WriteLatency, when set, is how long a write's operation takes: it
	// ends that long after it was accepted, whatever the polls, and until
	// then a GET of the resource shows provisioningState Updating (as ARM
	// does while an operation runs); PollSteps then does not apply. Zero:
	// operations end after PollSteps polls.
	WriteLatency time.Duration
	// Seed makes fault injection deterministic.
	Seed   uint64
	Faults Faults
	// Limits refuses a load balancer PUT with more children than a
	// Standard Load Balancer may have (StandardLBLimits); zero: any number
	// (limits.go). Off by default, so earlier figures stay comparable.
	Limits LBLimits
	// Throttle answers 429 with Retry-After when a principal's requests
	// empty its bucket (ARMThrottle); zero: never (limits.go). Off by
	// default, like Limits.
	Throttle Throttle
	// RecordPolls records every poll of an operation's status
	// (Kind "operation") and every read of its result ("operationResult")
	// as a Call, so that a figure counts each GET a client sent. Off by
	// default: polls are many (one each PollRetryAfter for as long as an
	// operation runs), and earlier records left them out; a poll that
	// learns its write was superseded is recorded either way.
	RecordPolls bool
}

// Faults are injected into requests that are not polls. Rate is the share of
// eligible requests that fail; the weights split it between the kinds (all
// zero means equal shares). Conflicts are injected into writes only: another
// writer touches the load balancer just before the request, so its If-Match
// no longer holds.
type Faults struct {
	Rate                                  float64
	Conflict, Throttle, ServerError, Slow float64
	// RetryAfter is sent with 429 responses (default 1s; whole seconds).
	RetryAfter time.Duration
	// SlowDelay is added to a slow request (default 200ms); a slow write also
	// needs three more polls.
	SlowDelay time.Duration
	// Cooldown is how many requests to the same load balancer after a fault
	// are never faulted: transient faults do not persist.
	Cooldown int
}

// Counters count requests as the emulator received them (attempts, including
// those that failed) and what came of them.
type Counters struct {
	Gets, LBPuts, PoolPuts, Deletes, Polls int
	// Tokens is the number of tokens the token endpoint issued.
	Tokens int
	// PutBytes is the size of every PUT body received.
	PutBytes int64
	// Writes is the number of writes that changed state.
	Writes int
	// PreconditionFailed counts 412 answers, Throttled 429s, ServerErrors
	// 500s, Slow the slowed requests; InjectedConflicts the foreign writes
	// made to cause a 412.
	PreconditionFailed, Throttled, ServerErrors, Slow, InjectedConflicts int
}

// Puts is every PUT received, to a load balancer or to one of its pools.
func (c Counters) Puts() int { return c.LBPuts + c.PoolPuts }

// Sub returns c - o, to count what happened between two readings.
func (c Counters) Sub(o Counters) Counters {
	return Counters{
		Gets: c.Gets - o.Gets, LBPuts: c.LBPuts - o.LBPuts, PoolPuts: c.PoolPuts - o.PoolPuts,
		Deletes: c.Deletes - o.Deletes, Polls: c.Polls - o.Polls, Tokens: c.Tokens - o.Tokens, PutBytes: c.PutBytes - o.PutBytes, Writes: c.Writes - o.Writes,
		PreconditionFailed: c.PreconditionFailed - o.PreconditionFailed, Throttled: c.Throttled - o.Throttled,
		ServerErrors: c.ServerErrors - o.ServerErrors, Slow: c.Slow - o.Slow,
		InjectedConflicts: c.InjectedConflicts - o.InjectedConflicts,
	}
}

// Emulator is the in-memory ARM. The zero value is not usable; call New.
type Emulator struct {
	opts Options

	// writeMu serialises writes from their precondition check to their
	// state change, as ARM does for one resource.
	writeMu sync.Mutex

	mu       sync.Mutex
	lbs      map[string]*armnetwork.LoadBalancer // by lower(resourceGroup/name)
	etagSeq  uint64
	ips      map[netip.Addr]string // address → frontend ID
	faults   Faults
	rng      *rand.Rand
	cooldown map[string]int
	counters Counters
	ops      map[string]*operation
	opSeq    uint64
	onWrite  func()            // see OnWrite
	subs     map[uint64]func() // see Subscribe
	subSeq   uint64
	// ruleHealth answers the rule-health operation (SetRuleHealth).
	ruleHealth RuleHealth
	// writesInFlight: see WritesInFlight.
	writesInFlight atomic.Int64

	docs      map[string]*document  // other resources, by resourceKey
	publicIPs map[netip.Addr]string // address → public IP's resourceKey
	calls     []Call
	// compute, when attached, serves the compute routes and owns NIC-based
	// pool membership (compute_hook.go).
	compute Compute
	// buckets are Options.Throttle's, by subscription, principal and kind.
	buckets map[string]*bucketState
}

// New returns an empty emulator.
func New(opts Options) *Emulator {
	if !opts.AddressPrefix.IsValid() {
		opts.AddressPrefix = netip.MustParsePrefix("127.240.0.0/16")
	}
	if !opts.PublicPrefix.IsValid() {
		opts.PublicPrefix = netip.MustParsePrefix("203.0.113.0/24")
	}
	if opts.PollSteps <= 0 {
		opts.PollSteps = 1
	}
	if opts.Location == "" {
		opts.Location = "westeurope"
	}
	if opts.PollRetryAfter <= 0 {
		opts.PollRetryAfter = 10 * time.Millisecond
	}
	e := &Emulator{
		opts:      opts,
		lbs:       map[string]*armnetwork.LoadBalancer{},
		ips:       map[netip.Addr]string{},
		rng:       rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x5eed)),
		cooldown:  map[string]int{},
		ops:       map[string]*operation{},
		docs:      map[string]*document{},
		publicIPs: map[netip.Addr]string{},
	}
	e.setFaults(opts.Faults)
	return e
}

// sdkRetry makes the SDK's retries wait milliseconds instead of seconds.
var sdkRetry = policy.RetryOptions{RetryDelay: 5 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond}

// ClientOptions route an armnetwork client to the emulator in memory: each
// request is served by ServeHTTP without a connection, the rest of the wire
// protocol (JSON bodies, headers, polling) as over a network. SDK retries
// wait milliseconds instead of seconds.
func (e *Emulator) ClientOptions() *arm.ClientOptions {
	return &arm.ClientOptions{
		ClientOptions: policy.ClientOptions{
			Transport: inMemory{e},
			Retry:     sdkRetry,
		},
		DisableRPRegistration: true,
	}
}

// Credential is a credential the emulator accepts.
func (e *Emulator) Credential() azcore.TokenCredential { return &azfake.TokenCredential{} }

// Counters returns the counters so far.
func (e *Emulator) Counters() Counters {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.counters
}

// OnWrite sets f to be called once each write (a PUT or DELETE that passed
// its precondition) has changed the emulator's state, before its response
// goes back; nil removes it. f runs with writes held (keep it short): the
// lab's kill-mid-plan stops the writer from it, with the write landed and
// the rest of its plan never sent.
func (e *Emulator) OnWrite(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.onWrite = f
}

// SetFaults replaces the fault configuration.
func (e *Emulator) SetFaults(f Faults) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.setFaults(f)
}

func (e *Emulator) setFaults(f Faults) {
	if f.Conflict+f.Throttle+f.ServerError+f.Slow == 0 {
		f.Conflict, f.Throttle, f.ServerError, f.Slow = 1, 1, 1, 1
	}
	if f.RetryAfter <= 0 {
		f.RetryAfter = time.Second
	}
	if f.SlowDelay <= 0 {
		f.SlowDelay = 200 * time.Millisecond
	}
	e.faults = f
}

// LoadBalancer returns a copy of a stored load balancer.
func (e *Emulator) LoadBalancer(resourceGroup, name string) (*armnetwork.LoadBalancer, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	lb, ok := e.lbs[lbKey(resourceGroup, name)]
	if !ok {
		return nil, false
	}
	return clone(e.withMembership(lb)), true
}

// Seed stores a load balancer as if someone else had created it (a
// pre-existing load balancer with foreign rules, say). It is validated and
// normalised like a PUT.
func (e *Emulator) Seed(subscriptionID, resourceGroup string, lb armnetwork.LoadBalancer) error {
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	e.mu.Lock()
	_, apiErr := e.storeLB(subscriptionID, resourceGroup, *lb.Name, lb)
	e.mu.Unlock()
	if apiErr != nil {
		return apiErr
	}
	e.notify()
	return nil
}

// Touch gives a load balancer a new ETag, as a foreign writer (a tag update,
// another controller) would.
func (e *Emulator) Touch(resourceGroup, name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.touch(lbKey(resourceGroup, name))
}

func (e *Emulator) touch(key string) bool {
	lb, ok := e.lbs[key]
	if !ok {
		return false
	}
	setEtag(lb, e.nextEtag())
	return true
}

func (e *Emulator) nextEtag() string {
	e.etagSeq++
	return fmt.Sprintf(`W/"%08x-0000-4000-8000-%012x"`, e.etagSeq, e.opts.Seed)
}

func lbKey(resourceGroup, name string) string {
	return strings.ToLower(resourceGroup + "/" + name)
}

// clone deep-copies an ARM document through its JSON form, as a real
// server would hand out a fresh document on every read.
func clone[T any](v *T) *T {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("emulator: marshal %T: %v", v, err))
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		panic(fmt.Sprintf("emulator: unmarshal %T: %v", v, err))
	}
	return out
}

// LoadBalancerNames lists the names of a resource group's load balancers.
func (e *Emulator) LoadBalancerNames(resourceGroup string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, lb := range e.lbs {
		if strings.EqualFold(resourceGroupOf(*lb.ID), resourceGroup) {
			out = append(out, *lb.Name)
		}
	}
	slices.Sort(out)
	return out
}
