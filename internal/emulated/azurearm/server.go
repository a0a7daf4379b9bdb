package azurearm

import (
	"context"
	"io"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The emulator is an HTTP server that speaks ARM's wire protocol for the
// resources a load-balancer controller uses, so that any ARM client can be
// pointed at it: zerodrop's provider (armnetwork v7, api-version 2025-01-01)
// and the real cloud-provider-azure (armnetwork v9, api-version 2025-05-01).
// Both wire versions are read into one stored model, the v7 documents; fields
// a version adds that v7 does not know are dropped, as an older server would.
// ServeHTTP is the only way in: ClientOptions hands it requests in memory,
// Handler serves it on a listener.

// Network API versions the emulator answers: armnetwork v7's and v9's, and
// v6.2.0's 2024-05-01, which cloud-provider-azure v1.33.2 sends (its
// pkg/azclient v0.8.5 requires armnetwork v6.2.0; loadbalancers_client.go
// sets that api-version), a subset of v7's documents for what is stored.
var networkVersions = []string{"2024-05-01", "2025-01-01", "2025-05-01"}

// target is what a request's path names.
type target struct {
	kind       string // one of the route kinds below
	sub, rg    string
	name       string // the resource's own name
	parent     string // a child's parent (a pool's load balancer, a subnet's network)
	location   string // an operation's location
	operation  string // an operation's ID
	apiVersion string
}

// Route kinds.
const (
	kMetadata   = "metadata"
	kToken      = "token"
	kOperation  = "operation"
	kProvider   = "provider"
	kLBs        = "loadBalancers"
	kLB         = "loadBalancer"
	kPools      = "backendAddressPools"
	kPool       = "backendAddressPool"
	kNSG        = "networkSecurityGroup"
	kPIPs       = "publicIPAddresses"
	kPIP        = "publicIPAddress"
	kSubnet     = "subnet"
	kVNet       = "virtualNetwork"
	kVMs        = "virtualMachines"
	kVM         = "virtualMachine"
	kVMSSes     = "virtualMachineScaleSets"
	kRouteTable = "routeTable"
	kPLSes      = "privateLinkServices"
	// kRuleHealth is a rule's health operation; kOperationResult the
	// Location of its result (health.go).
	kRuleHealth      = "ruleHealth"
	kOperationResult = "operationResult"
)

const (
	subRG = `^/subscriptions/([^/]+)/resourcegroups/([^/]+)/providers/`
	nw    = subRG + `microsoft\.network/`
)

// routes are matched against the lower-cased path; the names are then cut
// from the original path, so they keep their case.
var routes = []struct {
	re   *regexp.Regexp
	kind string
}{
	{regexp.MustCompile(`^/metadata/endpoints$`), kMetadata},
	{regexp.MustCompile(`^/(msi/token|metadata/identity/oauth2/token)$`), kToken},
	{regexp.MustCompile(`^/subscriptions/([^/]+)/providers/microsoft\.network/locations/([^/]+)/operations/([^/]+)$`), kOperation},
	{regexp.MustCompile(`^/subscriptions/([^/]+)/providers/(microsoft\.[a-z]+)$`), kProvider},
	{regexp.MustCompile(nw + `loadbalancers$`), kLBs},
	{regexp.MustCompile(nw + `loadbalancers/([^/]+)$`), kLB},
	{regexp.MustCompile(nw + `loadbalancers/([^/]+)/backendaddresspools$`), kPools},
	{regexp.MustCompile(nw + `loadbalancers/([^/]+)/backendaddresspools/([^/]+)$`), kPool},
	{regexp.MustCompile(nw + `networksecuritygroups/([^/]+)$`), kNSG},
	{regexp.MustCompile(nw + `publicipaddresses$`), kPIPs},
	{regexp.MustCompile(nw + `publicipaddresses/([^/]+)$`), kPIP},
	{regexp.MustCompile(nw + `virtualnetworks/([^/]+)$`), kVNet},
	{regexp.MustCompile(nw + `virtualnetworks/([^/]+)/subnets/([^/]+)$`), kSubnet},
	{regexp.MustCompile(nw + `routetables/([^/]+)$`), kRouteTable},
	{regexp.MustCompile(nw + `privatelinkservices$`), kPLSes},
	{regexp.MustCompile(nw + `loadbalancers/([^/]+)/loadbalancingrules/([^/]+)/health$`), kRuleHealth},
	{regexp.MustCompile(`^/subscriptions/([^/]+)/providers/microsoft\.network/locations/([^/]+)/operationresults/([^/]+)$`), kOperationResult},
	{regexp.MustCompile(subRG + `microsoft\.compute/virtualmachines$`), kVMs},
	{regexp.MustCompile(subRG + `microsoft\.compute/virtualmachines/([^/]+)$`), kVM},
	{regexp.MustCompile(subRG + `microsoft\.compute/virtualmachinescalesets$`), kVMSSes},
}

// parseTarget finds the route of a path. Child routes carry the parent
// first: [sub rg parent name].
func parseTarget(path, apiVersion string) (target, bool) {
	p := strings.TrimSuffix(path, "/")
	lp := strings.ToLower(p)
	for _, r := range routes {
		idx := r.re.FindStringSubmatchIndex(lp)
		if idx == nil {
			continue
		}
		var g []string
		for i := 2; i < len(idx); i += 2 {
			g = append(g, p[idx[i]:idx[i+1]])
		}
		t := target{kind: r.kind, apiVersion: apiVersion}
		switch r.kind {
		case kMetadata, kToken:
		case kOperation, kOperationResult:
			t.sub, t.location, t.operation = g[0], g[1], g[2]
		case kProvider:
			t.sub, t.name = g[0], g[1]
		case kPool, kSubnet, kRuleHealth:
			t.sub, t.rg, t.parent, t.name = g[0], g[1], g[2], g[3]
		case kPools:
			t.sub, t.rg, t.parent = g[0], g[1], g[2]
		default:
			t.sub, t.rg = g[0], g[1]
			if len(g) > 2 {
				t.name = g[2]
			}
		}
		return t, true
	}
	return target{}, false
}

// network reports whether the route is one of Microsoft.Network's.
func (t target) network() bool {
	switch t.kind {
	case kLBs, kLB, kPools, kPool, kNSG, kPIPs, kPIP, kSubnet, kVNet, kRouteTable, kPLSes, kRuleHealth, kOperation, kOperationResult:
		return true
	}
	return false
}

// faultKey is what fault cool-down and injected conflicts are counted on:
// a load balancer for it and its pools, else the resource.
func (t target) faultKey() string {
	switch t.kind {
	case kLB, kLBs:
		return lbKey(t.rg, t.name)
	case kPool, kPools, kRuleHealth:
		return lbKey(t.rg, t.parent)
	}
	return strings.ToLower(t.kind + "/" + t.rg + "/" + t.parent + "/" + t.name)
}

// reply is a response before it is written.
type reply struct {
	status int
	header http.Header
	body   []byte
	// err ends the request without an answer: its caller went away while
	// it was held (a slow fault).
	err error
}

func jsonReply(status int, body []byte) *reply {
	return &reply{status: status, header: http.Header{"Content-Type": {"application/json; charset=utf-8"}}, body: body}
}

// errorReply is an ARM error, as the SDK parses it into an
// *azcore.ResponseError: the code in the body and in x-ms-error-code.
func errorReply(status int, code, msg string) *reply {
	r := jsonReply(status, []byte(`{"error":{"code":`+strconv.Quote(code)+`,"message":`+strconv.Quote(msg)+`}}`))
	r.header.Set("X-Ms-Error-Code", code)
	return r
}

func apiErrorReply(a *apiError) *reply {
	code, msg, _ := strings.Cut(a.code, ": ")
	if msg == "" {
		msg = code
	}
	return errorReply(a.status, code, msg)
}

// ServeHTTP answers one ARM request.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
	}
	rep := e.serve(req, body)
	if rep.err != nil {
		return // nobody is waiting for the answer
	}
	for k, v := range rep.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rep.status)
	_, _ = w.Write(rep.body)
}

func (e *Emulator) serve(req *http.Request, body []byte) (out *reply) {
	write := req.Method == http.MethodPut || req.Method == http.MethodDelete
	if write {
		e.writesInFlight.Add(1)
		defer e.writesInFlight.Add(-1)
	}
	if rep, ok := e.serveCompute(req, body); ok {
		return rep
	}
	t, ok := parseTarget(req.URL.Path, req.URL.Query().Get("api-version"))
	if !ok {
		rep := errorReply(http.StatusNotFound, "NoRegisteredProviderFound", "emulator: no API at "+req.Method+" "+req.URL.Path)
		e.record(req, t, rep, nil, nil)
		return rep
	}
	switch t.kind {
	case kMetadata:
		return e.metadata(req)
	case kToken:
		return e.token(req)
	case kOperation:
		rep, canceled := e.pollOperation(t)
		e.mu.Lock()
		e.counters.Polls++
		e.mu.Unlock()
		if canceled != nil {
			e.recordSuperseded(req, canceled)
		} else {
			e.recordPoll(req, t, rep)
		}
		return rep
	case kOperationResult:
		rep := e.operationResult(t)
		e.mu.Lock()
		e.counters.Polls++
		e.mu.Unlock()
		e.recordPoll(req, t, rep)
		return rep
	}
	if rep := checkAuth(req); rep != nil {
		e.record(req, t, rep, nil, nil)
		return rep
	}
	if t.network() && !slices.Contains(networkVersions, t.apiVersion) {
		rep := errorReply(http.StatusBadRequest, "InvalidApiVersionParameter",
			"The api-version '"+t.apiVersion+"' is invalid. The supported versions are '"+strings.Join(networkVersions, "','")+"'.")
		e.record(req, t, rep, nil, nil)
		return rep
	}
	e.count(req.Method, t.kind == kPool, int64(len(body)))
	// ARM throttles before anything reaches the resource provider: a
	// throttled request is counted as received, and nothing else happens.
	// Operation polls are not throttled (served above): the emulator polls
	// every PollRetryAfter, far more often than ARM's 10 s would.
	if rep, header, left := e.throttle(req, t); rep != nil {
		e.record(req, t, rep, nil, nil)
		return rep
	} else if header != "" {
		defer func() {
			if out != nil && out.header != nil {
				out.header.Set(header, strconv.Itoa(left))
			}
		}()
	}
	info := reqInfo{subscription: t.sub, ifMatch: req.Header.Get("If-Match"), ifNoneMatch: req.Header.Get("If-None-Match")}
	if rep := e.injectFault(req.Context(), t, write, &info); rep != nil {
		e.record(req, t, rep, nil, nil)
		return rep
	}
	if t.kind == kRuleHealth {
		rep := e.startRuleHealth(req, t)
		e.record(req, t, rep, nil, nil)
		return rep
	}
	if !write {
		rep := e.read(req, t)
		e.record(req, t, rep, nil, nil)
		return rep
	}
	// A write: its precondition and its state change are one step.
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	before := e.document(t)
	rep := e.precondition(t, info)
	if rep == nil {
		rep = e.write(req, t, body, info)
	}
	e.record(req, t, rep, before, e.document(t))
	if rep.status < http.StatusBadRequest {
		e.mu.Lock()
		f := e.onWrite
		e.mu.Unlock()
		if f != nil {
			f()
		}
		e.notify()
	}
	return rep
}

// checkAuth refuses a request without a bearer token, as ARM does; any
// token the emulator's token endpoint issued, or a fake credential's, passes.
func checkAuth(req *http.Request) *reply {
	if strings.HasPrefix(req.Header.Get("Authorization"), "Bearer ") {
		return nil
	}
	rep := errorReply(http.StatusUnauthorized, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing.")
	rep.header.Set("WWW-Authenticate", `Bearer authorization_uri="https://login.microsoftonline.com/common", error="invalid_token"`)
	return rep
}

// injectFault draws a fault for a request that is not a poll; a conflict is
// a foreign write made before the request, a slow request waits and marks
// info so that its operation needs more polls.
func (e *Emulator) injectFault(ctx context.Context, t target, write bool, info *reqInfo) *reply {
	key := t.faultKey()
	switch e.decideFault(key, write) {
	case faultThrottle:
		after := int(math.Ceil(e.faultsNow().RetryAfter.Seconds()))
		rep := errorReply(http.StatusTooManyRequests, "TooManyRequests", "the request is throttled")
		rep.header.Set("Retry-After", strconv.Itoa(after))
		return rep
	case faultServerError:
		return errorReply(http.StatusInternalServerError, "InternalServerError", "injected server error")
	case faultConflict:
		e.mu.Lock()
		if e.touch(key) {
			e.counters.InjectedConflicts++
		}
		e.mu.Unlock()
	case faultSlow:
		info.slow = true
		select {
		case <-time.After(e.faultsNow().SlowDelay):
		case <-ctx.Done():
			return &reply{status: http.StatusServiceUnavailable, header: http.Header{}, err: ctx.Err()}
		}
	}
	return nil
}

// withState shows the resource Updating while a write's operation on it
// runs (Options.WriteLatency). e.mu is held.
func (e *Emulator) withState(t target, rep *reply) *reply {
	if rep.status == http.StatusOK && e.updating(t.faultKey()) {
		rep.body = withProvisioningState(rep.body, "Updating")
	}
	return rep
}

// read answers a GET.
func (e *Emulator) read(req *http.Request, t target) *reply {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch t.kind {
	case kLB:
		lb, ok := e.lbs[lbKey(t.rg, t.name)]
		if !ok {
			return notFound(t)
		}
		return e.withState(t, docReply(http.StatusOK, e.withMembership(lb)))
	case kLBs:
		return e.listLBs(t)
	case kPool:
		if p := findPool(e.withMembership(e.lbs[lbKey(t.rg, t.parent)]), t.name); p != nil {
			return e.withState(t, docReply(http.StatusOK, p))
		}
		return notFound(t)
	case kPools:
		lb, ok := e.lbs[lbKey(t.rg, t.parent)]
		if !ok {
			return notFound(t)
		}
		return listReply(e.withMembership(lb).Properties.BackendAddressPools)
	case kProvider:
		return e.provider(t)
	case kVMs:
		return e.listGeneric(t, kVM)
	case kVMSSes, kPLSes:
		// None modelled: cloud-provider-azure lists the resource group's
		// scale sets to place nodes, and its private link services when a
		// Service leaves a load balancer (to remove one attached to the
		// frontend, pkg/provider/azure_privatelinkservice.go).
		return jsonReply(http.StatusOK, []byte(`{"value":[]}`))
	case kPIPs:
		return e.listGeneric(t, kPIP)
	}
	if doc, ok := e.docs[resourceKey(t)]; ok {
		return jsonReply(http.StatusOK, doc.body)
	}
	return notFound(t)
}

// write answers a PUT or a DELETE whose precondition held. e.writeMu is held.
func (e *Emulator) write(req *http.Request, t target, body []byte, info reqInfo) *reply {
	var rep *reply
	switch {
	case t.kind == kLB && req.Method == http.MethodPut:
		rep = e.putLB(t, body)
	case t.kind == kLB:
		rep = e.deleteLB(t)
	case t.kind == kPool && req.Method == http.MethodPut:
		rep = e.putPool(t, body)
	case t.kind == kPool:
		rep = e.deletePool(t)
	case t.kind == kNSG || t.kind == kPIP || t.kind == kRouteTable:
		if req.Method == http.MethodPut {
			rep = e.putGeneric(t, body)
		} else {
			rep = e.deleteGeneric(t)
		}
	default:
		return errorReply(http.StatusMethodNotAllowed, "MethodNotAllowed", "emulator: "+req.Method+" is not served on "+t.kind)
	}
	if rep.status >= http.StatusBadRequest {
		return rep
	}
	e.mu.Lock()
	e.counters.Writes++
	e.mu.Unlock()
	return e.startOperation(req, t, rep, info)
}

func notFound(t target) *reply {
	code := "ResourceNotFound"
	if t.kind == kPool {
		code = "NotFound"
	}
	return errorReply(http.StatusNotFound, code, "The Resource '"+t.kind+"/"+t.name+"' under resource group '"+t.rg+"' was not found.")
}
