package emulator

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7/fake"
)

// transport sits in front of the SDK's fake server transport. It does what
// the fake servers cannot see from their typed arguments: request headers
// (If-Match, If-None-Match), counting, fault injection, and keeping
// concurrent long-running operations on one resource apart.
type transport struct {
	e      *Emulator
	shared policy.Transporter
}

// opTransport is the fake transport that owns one long-running operation.
type opTransport struct{ t policy.Transporter }

// reqInfo is what the fake servers learn about a request through its context.
type reqInfo struct {
	subscription         string
	ifMatch, ifNoneMatch string
	slow                 bool
}

type infoKey struct{}

func infoFrom(ctx context.Context) reqInfo {
	info, _ := ctx.Value(infoKey{}).(reqInfo)
	return info
}

const (
	// pollSuffix is what the SDK's fake poller appends to a resource path.
	pollSuffix = "/get/fake/status"
	// opParam tags an operation's initial request, and so its poll URL.
	opParam = "zerodrop-emulator-op"
)

var lbPath = regexp.MustCompile(`(?i)^/subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/Microsoft\.Network/loadBalancers/([^/]+)(?:/backendAddressPools/([^/]+))?`)

type faultKind int

const (
	noFault faultKind = iota
	faultConflict
	faultThrottle
	faultServerError
	faultSlow
)

// Do implements policy.Transporter.
func (t *transport) Do(req *http.Request) (*http.Response, error) {
	e := t.e
	m := lbPath.FindStringSubmatch(req.URL.Path)
	if m == nil {
		return nil, fmt.Errorf("emulator: no API at %s %s", req.Method, req.URL.Path)
	}
	sub, rg, lbName, pool := m[1], m[2], m[3], m[4]
	key := lbKey(rg, lbName)
	if strings.HasSuffix(req.URL.Path, pollSuffix) {
		return t.poll(req)
	}
	write := req.Method == http.MethodPut || req.Method == http.MethodDelete
	e.count(req.Method, pool != "", req.ContentLength)

	info := reqInfo{subscription: sub, ifMatch: req.Header.Get("If-Match"), ifNoneMatch: req.Header.Get("If-None-Match")}
	switch e.decideFault(key, write) {
	case faultThrottle:
		after := int(math.Ceil(e.faultsNow().RetryAfter.Seconds()))
		return errorResponse(req, http.StatusTooManyRequests, "TooManyRequests",
			"the request is throttled", map[string]string{"Retry-After": strconv.Itoa(after)}), nil
	case faultServerError:
		return errorResponse(req, http.StatusInternalServerError, "InternalServerError", "injected server error", nil), nil
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
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	// The fake transports get a context that is never cancelled: they close
	// their result channel when the caller's context ends while their
	// server goroutine may still send on it (a panic). Our fakes never
	// block, so nothing waits on a cancelled caller.
	ctx := context.WithValue(context.WithoutCancel(req.Context()), infoKey{}, info)
	if !write {
		return t.shared.Do(req.WithContext(ctx))
	}

	// A write: its precondition and its state change are one step.
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	if msg := e.precondition(key, pool, info); msg != "" {
		e.mu.Lock()
		e.counters.PreconditionFailed++
		e.mu.Unlock()
		return errorResponse(req, http.StatusPreconditionFailed, "PreconditionFailed", msg, nil), nil
	}
	// Each operation gets its own fake transport and its own poll URL: the
	// SDK's fake poller tracks operations by path, so two operations on one
	// resource would otherwise be polled as one.
	e.mu.Lock()
	e.opSeq++
	id := strconv.FormatUint(e.opSeq, 10)
	e.mu.Unlock()
	u := *req.URL
	q := u.Query()
	q.Set(opParam, id)
	u.RawQuery = q.Encode()
	opReq := req.Clone(ctx)
	opReq.URL = &u
	ot := &opTransport{t: fake.NewServerFactoryTransport(&e.factory)}
	resp, err := ot.t.Do(opReq)
	if err == nil && !terminal(resp) {
		e.mu.Lock()
		e.ops[id] = ot
		e.mu.Unlock()
	}
	if err == nil && resp.StatusCode < http.StatusBadRequest {
		e.mu.Lock()
		f := e.onWrite
		e.mu.Unlock()
		if f != nil {
			f()
		}
	}
	return resp, err
}

func (t *transport) poll(req *http.Request) (*http.Response, error) {
	e := t.e
	id := req.URL.Query().Get(opParam)
	e.mu.Lock()
	e.counters.Polls++
	ot := e.ops[id]
	e.mu.Unlock()
	if ot == nil {
		return errorResponse(req, http.StatusNotFound, "OperationNotFound", "no operation "+id, nil), nil
	}
	resp, err := ot.t.Do(req.WithContext(context.WithoutCancel(req.Context())))
	if err != nil || terminal(resp) {
		e.mu.Lock()
		delete(e.ops, id)
		e.mu.Unlock()
	}
	return resp, err
}

// terminal reports whether a fake long-running operation has finished.
func terminal(resp *http.Response) bool {
	// Errors carry no poller status: they end the operation too.
	return resp.Header.Get("Fake-Poller-Status") != "InProgress"
}

func (e *Emulator) count(method string, pool bool, size int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if method == http.MethodPut && size > 0 {
		e.counters.PutBytes += size
	}
	switch {
	case method == http.MethodGet:
		e.counters.Gets++
	case method == http.MethodPut && pool:
		e.counters.PoolPuts++
	case method == http.MethodPut:
		e.counters.LBPuts++
	case method == http.MethodDelete:
		e.counters.Deletes++
	}
}

func (e *Emulator) faultsNow() Faults {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.faults
}

// decideFault draws whether this request fails, and how, from the seeded
// generator; after a fault the load balancer has Cooldown clean requests.
func (e *Emulator) decideFault(key string, write bool) faultKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	f := e.faults
	if f.Rate <= 0 {
		return noFault
	}
	if e.cooldown[key] > 0 {
		e.cooldown[key]--
		return noFault
	}
	if e.rng.Float64() >= f.Rate {
		return noFault
	}
	conflict := f.Conflict
	if !write {
		conflict = 0
	}
	total := conflict + f.Throttle + f.ServerError + f.Slow
	if total <= 0 {
		return noFault
	}
	e.cooldown[key] = f.Cooldown
	x := e.rng.Float64() * total
	switch {
	case x < conflict:
		return faultConflict
	case x < conflict+f.Throttle:
		e.counters.Throttled++
		return faultThrottle
	case x < conflict+f.Throttle+f.ServerError:
		e.counters.ServerErrors++
		return faultServerError
	default:
		e.counters.Slow++
		return faultSlow
	}
}

// precondition checks If-Match and If-None-Match against the current
// document; it returns why the request fails, or "".
func (e *Emulator) precondition(key, pool string, info reqInfo) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	lb, exists := e.lbs[key]
	current := ""
	if exists {
		current = *lb.Etag
		if pool != "" {
			p := findPool(lb, pool)
			exists = p != nil
			if p != nil && p.Etag != nil {
				current = *p.Etag
			}
		}
	}
	switch {
	case info.ifNoneMatch == "*" && exists:
		return "the resource exists (If-None-Match: *)"
	case info.ifMatch == "":
		return ""
	case !exists:
		return "the resource does not exist (If-Match: " + info.ifMatch + ")"
	case info.ifMatch != "*" && info.ifMatch != current:
		return fmt.Sprintf("ETag %s does not match If-Match %s", current, info.ifMatch)
	}
	return ""
}

// errorResponse is an ARM error response, as the SDK parses it into an
// *azcore.ResponseError.
func errorResponse(req *http.Request, status int, code, msg string, header map[string]string) *http.Response {
	body := fmt.Sprintf(`{"error":{"code":%q,"message":%q}}`, code, msg)
	h := http.Header{"Content-Type": {"application/json; charset=utf-8"}, "X-Ms-Error-Code": {code}}
	for k, v := range header {
		h.Set(k, v)
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req,
	}
}
