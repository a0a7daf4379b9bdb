package azurearm

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Long-running operations as the network resource provider runs them: a
// PUT is answered 201 (created) or 200 (updated) with the document in
// provisioningState Updating, a DELETE 202, each with an
// Azure-AsyncOperation URL to poll and a Retry-After; the status document
// says InProgress until the operation ends, then Succeeded — or Canceled
// with CanceledAndSupersededDueToAnotherOperation when a later write to the
// same load balancer superseded it (the code cloud-provider-azure matches in
// pkg/provider/azure_loadbalancer.go). For a PUT the client then reads the
// resource itself (azcore's async poller: the final GET is on the original
// URL). The change is stored when the write is accepted, so a reader sees it
// at once; only its completion waits: the operation's PollSteps-th poll
// answers that it ended.
// References: ARM's asynchronous operations,
// https://learn.microsoft.com/azure/azure-resource-manager/management/async-operations.

type operation struct {
	key    string // faultKey of the resource it changes
	client string // the writer that started it (see clientOf)
	polls  int    // InProgress answers left
	// end, when set (Options.WriteLatency), is when it ends instead.
	end    time.Time
	status string // when it ends: Succeeded or Canceled
	// health, for a rule-health operation: its answer, computed when it
	// ends (health.go).
	health *healthQuery
	// ended is when a client was first told the operation ended; result is
	// what it was told, told again to a client that asks again (a retry:
	// azcore retries a 500 on its own), until opRetention has passed.
	ended  time.Time
	result *reply
}

// opRetention is how long an ended operation's status and result stay
// readable. ARM keeps an operation's URLs answering after it ended (a
// client's retried GET gets the same answer, not a 404); how long it does
// is not documented, and a minute outlasts every client's retries here.
const opRetention = time.Minute

// finish records the answer that told a client the operation ended; e.mu is
// held.
func (op *operation) finish(now time.Time, rep *reply) *reply {
	op.ended, op.result = now, rep
	return rep
}

// pruneOperations forgets the operations that ended more than opRetention
// ago; e.mu is held.
func (e *Emulator) pruneOperations(now time.Time) {
	for id, op := range e.ops {
		if !op.ended.IsZero() && now.Sub(op.ended) > opRetention {
			delete(e.ops, id)
		}
	}
}

// running reports whether the operation has not ended yet.
func (op *operation) running(now time.Time) bool {
	if !op.end.IsZero() {
		return now.Before(op.end)
	}
	return op.polls > 0
}

// poll is one poll of the operation: whether it still runs, spending one of
// its in-progress answers when it ends by polls.
func (op *operation) poll(now time.Time) bool {
	if !op.running(now) {
		return false
	}
	if op.end.IsZero() {
		op.polls--
	}
	return true
}

// newOperation registers an operation on the resource of key that ends
// after polls in-progress answers, or after Options.WriteLatency when set;
// it returns its ID. e.mu is held.
func (e *Emulator) newOperation(key, client string, polls int, health *healthQuery) string {
	e.pruneOperations(time.Now())
	e.opSeq++
	id := strconv.FormatUint(e.opSeq, 10)
	op := &operation{key: key, client: client, polls: polls, status: "Succeeded", health: health}
	if e.opts.WriteLatency > 0 {
		op.end = time.Now().Add(e.opts.WriteLatency)
	}
	e.ops[id] = op
	return id
}

const superseded = "CanceledAndSupersededDueToAnotherOperation"

// startOperation turns a write's reply into the start of its operation.
func (e *Emulator) startOperation(req *http.Request, t target, rep *reply, info reqInfo) *reply {
	if rep.status == http.StatusNoContent {
		return rep // a DELETE of nothing ends at once, as in ARM
	}
	e.mu.Lock()
	key := t.faultKey()
	now := time.Now()
	for _, op := range e.ops {
		if op.key == key && op.health == nil && op.running(now) {
			op.polls, op.status = 0, "Canceled"
			if !op.end.IsZero() {
				op.end = now
			}
		}
	}
	id := e.newOperation(key, clientOf(req), e.pollSteps(info)-1, nil)
	after := e.opts.PollRetryAfter
	e.mu.Unlock()

	opURL := BaseURL(req) + "subscriptions/" + t.sub + "/providers/Microsoft.Network/locations/" +
		e.opts.Location + "/operations/" + id + "?api-version=" + t.apiVersion
	rep.header.Set("Azure-AsyncOperation", opURL)
	setRetryAfter(rep.header, after)
	if req.Method == http.MethodDelete {
		rep.header.Set("Location", opURL)
		return rep
	}
	rep.body = withProvisioningState(rep.body, "Updating")
	return rep
}

// pollOperation answers a GET of an operation's status; canceled is the
// operation when this answer says it was superseded.
func (e *Emulator) pollOperation(t target) (rep *reply, canceled *operation) {
	e.mu.Lock()
	defer e.mu.Unlock()
	op, ok := e.ops[t.operation]
	if !ok {
		return errorReply(http.StatusNotFound, "OperationNotFound", "no operation "+t.operation), nil
	}
	if op.result != nil {
		return op.result, nil // asked again: the same answer, not recorded again
	}
	now := time.Now()
	if op.poll(now) {
		rep := jsonReply(http.StatusOK, []byte(`{"status":"InProgress"}`))
		setRetryAfter(rep.header, e.opts.PollRetryAfter)
		return rep, nil
	}
	if op.status == "Canceled" {
		return op.finish(now, jsonReply(http.StatusOK, []byte(`{"status":"Canceled","error":{"code":"`+superseded+
			`","message":"`+supersededMessage+`"}}`))), op
	}
	return op.finish(now, jsonReply(http.StatusOK, []byte(`{"status":"Succeeded"}`))), nil
}

const supersededMessage = "Operation was canceled and superseded by another operation on the same resource."

// recordSuperseded records the end of a superseded operation, as its writer
// learnt it (polls are not recorded otherwise): Kind "operation", the
// writer's identity, the resource and the error code, so that a figure can
// count each writer's superseded operations.
func (e *Emulator) recordSuperseded(req *http.Request, op *operation) {
	c := Call{Time: time.Now(), Client: op.client, Method: req.Method, Kind: kOperation, Resource: op.key,
		Status: http.StatusOK, Error: superseded + ": " + supersededMessage}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.appendCall(c)
}

// recordPoll records a GET of an operation's status or result when
// Options.RecordPolls asks for it. Polls are never throttled (serve), so
// they answer 200 unless the operation is unknown.
func (e *Emulator) recordPoll(req *http.Request, t target, rep *reply) {
	if !e.opts.RecordPolls {
		return
	}
	c := Call{Time: time.Now(), Client: clientOf(req), Method: req.Method, Kind: t.kind,
		Resource: "operations/" + t.operation, APIVersion: t.apiVersion, Status: rep.status}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.appendCall(c)
}

// setRetryAfter says when to poll again: ARM's Retry-After in seconds, or
// for an emulator faster than ARM the milliseconds azcore also reads.
func setRetryAfter(h http.Header, d time.Duration) {
	if d >= time.Second {
		h.Set("Retry-After", strconv.Itoa(int(d/time.Second)))
		return
	}
	h.Set("Retry-After-Ms", strconv.FormatInt(d.Milliseconds(), 10))
}

func (e *Emulator) pollSteps(info reqInfo) int {
	if info.slow {
		return e.opts.PollSteps + 3
	}
	return e.opts.PollSteps
}

// updating reports whether an operation that writes the resource of key
// is still running with a write latency (Options.WriteLatency): a GET then
// shows it Updating. Operations that end by their polls are left out: a
// writer that never polls (one that was killed) would leave them running
// for ever. e.mu is held.
func (e *Emulator) updating(key string) bool {
	now := time.Now()
	for _, op := range e.ops {
		if op.key == key && op.health == nil && !op.end.IsZero() && op.running(now) {
			return true
		}
	}
	return false
}

// withProvisioningState returns a document with another
// properties.provisioningState.
func withProvisioningState(doc []byte, state string) []byte {
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		return doc
	}
	props, _ := m["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
		m["properties"] = props
	}
	props["provisioningState"] = state
	out, err := json.Marshal(m)
	if err != nil {
		return doc
	}
	return out
}
