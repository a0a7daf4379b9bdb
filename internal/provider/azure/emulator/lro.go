package emulator

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
	polls  int    // InProgress answers left
	status string // when it ends: Succeeded or Canceled
}

const superseded = "CanceledAndSupersededDueToAnotherOperation"

// startOperation turns a write's reply into the start of its operation.
func (e *Emulator) startOperation(req *http.Request, t target, rep *reply, info reqInfo) *reply {
	if rep.status == http.StatusNoContent {
		return rep // a DELETE of nothing ends at once, as in ARM
	}
	e.mu.Lock()
	key := t.faultKey()
	for _, op := range e.ops {
		if op.key == key && op.polls > 0 {
			op.polls, op.status = 0, "Canceled"
		}
	}
	e.opSeq++
	id := strconv.FormatUint(e.opSeq, 10)
	e.ops[id] = &operation{key: key, polls: e.pollSteps(info) - 1, status: "Succeeded"}
	after := e.opts.PollRetryAfter
	e.mu.Unlock()

	opURL := baseURL(req) + "subscriptions/" + t.sub + "/providers/Microsoft.Network/locations/" +
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

// pollOperation answers a GET of an operation's status.
func (e *Emulator) pollOperation(t target) *reply {
	e.mu.Lock()
	defer e.mu.Unlock()
	op, ok := e.ops[t.operation]
	if !ok {
		return errorReply(http.StatusNotFound, "OperationNotFound", "no operation "+t.operation)
	}
	if op.polls > 0 {
		op.polls--
		rep := jsonReply(http.StatusOK, []byte(`{"status":"InProgress"}`))
		setRetryAfter(rep.header, e.opts.PollRetryAfter)
		return rep
	}
	delete(e.ops, t.operation)
	if op.status == "Canceled" {
		return jsonReply(http.StatusOK, []byte(`{"status":"Canceled","error":{"code":"`+superseded+
			`","message":"Operation was canceled and superseded by another operation on the same resource."}}`))
	}
	return jsonReply(http.StatusOK, []byte(`{"status":"Succeeded"}`))
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
