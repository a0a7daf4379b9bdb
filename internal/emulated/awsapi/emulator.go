package awsapi

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// The signing names the SDKs use, which are also the emulator's two APIs.
const (
	apiELB = "elasticloadbalancing"
	apiEC2 = "ec2"
)

// Fixed credentials: a client signs with these (the SDK's static
// credentials provider, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY for the
// CCM), and anything else is refused.
const (
	AccessKeyID     = "AKIDZERODROPEMULATOR"
	SecretAccessKey = "zerodrop/emulated/secret/access/key/0000"
	DefaultRegion   = "us-east-1"
	// AccountID is the account in every ARN and owner ID.
	AccountID = "123456789012"
	// SecondAccessKeyID and SecondSecretAccessKey are a second key pair
	// of the same account, for a second client whose calls the record
	// tells apart (Call.Caller): the lab gives it to zerodrop, the first
	// to the cloud controller.
	SecondAccessKeyID     = "AKIDZERODROPSECOND01"
	SecondSecretAccessKey = "zerodrop/emulated/secret/access/key/0001"
)

// ProbeRequest is one health check the emulator needs answered: which
// target, at which address and port, with which protocol and path.
type ProbeRequest struct {
	TargetGroupARN string
	Target         Target
	// IP is the instance's private address; Port the health check's port
	// (the traffic port unless the target group names another).
	IP       string
	Port     int32
	Protocol string // TCP, HTTP or HTTPS
	Path     string // for HTTP(S)
}

// Options configure an Emulator; zero values get defaults.
type Options struct {
	Region string // default us-east-1
	// Now is the emulator's clock (default time.Now): target health and
	// the call record follow it. Signatures are checked against the wall
	// clock whatever it is.
	Now func() time.Time
	// Probe answers a health check at a scheduled time (default: every
	// check passes). The lab probes node ports; tests give a function.
	Probe func(p ProbeRequest, at time.Time) CheckResult
	// RegistrationDelay and Propagation: see the Default constants.
	// Negative means zero.
	RegistrationDelay, Propagation time.Duration
	// HealthCheckRanges refuses a target group's health-check timing
	// outside AWS's ranges, as AWS does (targets.go, healthCheckRanges):
	// on where a real client writes what a user asked for (the lab's
	// world, the CCM writing a Service's annotations); off for harnesses
	// that compress time into checks a second apart.
	HealthCheckRanges bool
}

// Emulator is an in-memory ELBv2 and EC2 for one account and region,
// served as the AWS query protocols (ServeHTTP). The zero value is not
// usable; call New.
type Emulator struct {
	opts   Options
	verify verifier

	mu        sync.Mutex
	seq       uint64
	lbs       map[string]*loadBalancer // by ARN
	tgs       map[string]*targetGroup
	listeners map[string]*listener
	tags      map[string]map[string]string // by ARN or EC2 resource ID
	instances map[string]*Instance
	subnets   map[string]*Subnet
	routes    map[string]*RouteTable
	sgs       map[string]*SecurityGroup
	classic   map[string]*classicLB // classic ELBs by name (elb.go)
	calls     []Call
	throttle  func(api, op string) bool
}

// New returns an empty emulator.
func New(opts Options) *Emulator {
	if opts.Region == "" {
		opts.Region = DefaultRegion
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Probe == nil {
		opts.Probe = func(ProbeRequest, time.Time) CheckResult { return CheckResult{OK: true} }
	}
	if opts.RegistrationDelay == 0 {
		opts.RegistrationDelay = DefaultRegistrationDelay
	}
	if opts.Propagation == 0 {
		opts.Propagation = DefaultPropagation
	}
	opts.RegistrationDelay, opts.Propagation = max(opts.RegistrationDelay, 0), max(opts.Propagation, 0)
	return &Emulator{
		opts: opts,
		verify: verifier{accessKey: AccessKeyID, secret: SecretAccessKey, region: opts.Region, now: time.Now, skew: 15 * time.Minute,
			others: map[string]string{SecondAccessKeyID: SecondSecretAccessKey}},
		lbs: map[string]*loadBalancer{}, tgs: map[string]*targetGroup{}, listeners: map[string]*listener{},
		tags: map[string]map[string]string{}, instances: map[string]*Instance{}, subnets: map[string]*Subnet{},
		routes: map[string]*RouteTable{}, sgs: map[string]*SecurityGroup{}, classic: map[string]*classicLB{},
	}
}

// Region is the one region the emulator answers for.
func (e *Emulator) Region() string { return e.opts.Region }

// Throttle makes the requests for which f is true fail as the service
// throttles: ELBv2 with Throttling, EC2 with RequestLimitExceeded. api is
// "elasticloadbalancing" or "ec2"; nil: never.
func (e *Emulator) Throttle(f func(api, op string) bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.throttle = f
}

// Call is one request the emulator answered.
type Call struct {
	Time      time.Time
	API       string // elasticloadbalancing (ELBv2), elb (classic ELB) or ec2
	Operation string
	// Params is the request's form without Action and Version.
	Params url.Values
	Status int
	// Error is the error code of a refused request.
	Error string
	// Caller is the access key ID the request was signed with ("" when
	// unsigned); a refused signature's is only claimed.
	Caller string
}

// Write reports whether the call was an accepted write (anything but
// Describe*).
func (c Call) Write() bool {
	return c.Status < 300 && !strings.HasPrefix(c.Operation, "Describe")
}

func (c Call) String() string {
	s := fmt.Sprintf("%s %s %s → %d", c.Time.Format(time.RFC3339Nano), c.API, c.Operation, c.Status)
	if c.Error != "" {
		s += " " + c.Error
	}
	return s
}

// maxCalls bounds the record; the oldest tenth goes first.
const maxCalls = 100_000

// Calls returns the calls recorded since the n-th (0: all); next is where
// the following reading starts.
func (e *Emulator) Calls(since int) (calls []Call, next int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	since = min(max(since, 0), len(e.calls))
	return slices.Clone(e.calls[since:]), len(e.calls)
}

// WritesByOperation counts the accepted writes among calls, by operation.
func WritesByOperation(calls []Call) map[string]int {
	out := map[string]int{}
	for _, c := range calls {
		if c.Write() {
			out[c.Operation]++
		}
	}
	return out
}

// handler answers one operation with its output document (nil: empty);
// e.mu is held.
type handler func(e *Emulator, p params) (any, error)

var handlers = map[string]map[string]handler{apiELB: elbHandlers, apiEC2: ec2Handlers, apiClassic: classicHandlers}

// maxBody bounds a request's form.
const maxBody = 1 << 20

// ServeHTTP answers one query-protocol request: the API is chosen by its
// Version (ELBv2 2015-12-01, EC2 2016-11-15), its signature verified for
// that API's signing name, then the operation runs on the state.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		form = url.Values{}
	}
	for k, v := range r.URL.Query() {
		form[k] = append(form[k], v...)
	}
	api := apiELB
	switch form.Get("Version") {
	case ec2Version:
		api = apiEC2
	case classicVersion:
		api = apiClassic
	}
	op := form.Get("Action")

	e.mu.Lock()
	defer e.mu.Unlock()
	e.seq++
	reqID := fmt.Sprintf("00000000-0000-4000-8000-%012x", e.seq)
	out, aerr := e.answer(r, body, form, api, op)
	call := Call{Time: e.opts.Now(), API: api, Operation: op, Params: form, Status: http.StatusOK, Caller: signedBy(r)}
	delete(call.Params, "Action")
	delete(call.Params, "Version")
	var doc []byte
	if aerr == nil {
		doc, err = resultDocument(api, op, out, reqID)
		if err != nil {
			aerr = errorf(http.StatusInternalServerError, "InternalFailure", "encoding the response: %v", err)
		}
	}
	if aerr != nil {
		call.Status, call.Error = aerr.status, aerr.code
		doc = errorDocument(api, aerr, reqID)
	}
	e.appendCall(call)
	writeXML(w, call.Status, doc)
}

func (e *Emulator) answer(r *http.Request, body []byte, form url.Values, api, op string) (any, *apiError) {
	if v := form.Get("Version"); v != elbVersion && v != ec2Version && v != classicVersion {
		return nil, errorf(http.StatusBadRequest, "InvalidAction", "unsupported API version %q", form.Get("Version"))
	}
	signing := api
	if api == apiClassic { // both ELB APIs sign as elasticloadbalancing
		signing = apiELB
	}
	if f := e.verify.verify(r, body, signing); f != nil {
		return nil, authFailure(api, f)
	}
	if e.throttle != nil && e.throttle(api, op) {
		if api == apiEC2 {
			return nil, errorf(http.StatusServiceUnavailable, "RequestLimitExceeded", "Request limit exceeded.")
		}
		return nil, errorf(http.StatusBadRequest, "Throttling", "Rate exceeded")
	}
	h, ok := handlers[api][op]
	if !ok {
		return nil, errorf(http.StatusBadRequest, "InvalidAction", "The action %s is not valid for this web service.", op)
	}
	out, err := h(e, params{v: form})
	if err != nil {
		if ae, ok := err.(*apiError); ok {
			return nil, ae
		}
		return nil, errorf(http.StatusInternalServerError, "InternalFailure", "%v", err)
	}
	return out, nil
}

// authFailure is a refused signature in the service's words: a scope for
// another service or region, or a signature that does not match, is
// SignatureDoesNotMatch; EC2 calls an unknown key AuthFailure (EC2 API
// reference, common client errors), ELB InvalidClientTokenId.
func authFailure(api string, f *sigFailure) *apiError {
	code := "SignatureDoesNotMatch"
	switch f.kind {
	case sigMissing:
		code = "MissingAuthenticationToken"
		if api == apiEC2 {
			code = "AuthFailure"
		}
	case sigUnknownKey:
		code = "InvalidClientTokenId"
		if api == apiEC2 {
			code = "AuthFailure"
		}
	case sigExpired:
		code = "RequestExpired"
	}
	return errorf(http.StatusForbidden, code, "%s", f.msg)
}

func (e *Emulator) appendCall(c Call) {
	if len(e.calls) >= maxCalls {
		e.calls = slices.Delete(e.calls, 0, len(e.calls)/10)
	}
	e.calls = append(e.calls, c)
}

// newID is an AWS-style resource ID: prefix-<17 hex digits>.
func (e *Emulator) newID(prefix string) string {
	e.seq++
	return fmt.Sprintf("%s-%017x", prefix, e.seq)
}

// tagsOf returns a resource's tags, sorted by key, as pairs.
func (e *Emulator) tagsOf(id string) []kv {
	var out []kv
	for k, v := range e.tags[id] {
		out = append(out, kv{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].k < out[j].k })
	return out
}

func (e *Emulator) setTags(id string, tags map[string]string) {
	if len(tags) == 0 {
		return
	}
	if e.tags[id] == nil {
		e.tags[id] = map[string]string{}
	}
	for k, v := range tags {
		e.tags[id][k] = v
	}
}

type kv struct{ k, v string }
