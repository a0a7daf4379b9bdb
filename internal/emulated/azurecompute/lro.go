package azurecompute

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
)

// Long-running writes. ARM runs a scale-set, scale-set VM or NIC PUT as an
// asynchronous operation (REST reference: VirtualMachineScaleSetVMs_Update
// answers 200 or 202 with Azure-AsyncOperation; the SDK's BeginUpdate and
// BeginCreateOrUpdate poll it). With Options.WriteLatency zero a write ends
// at once (200, provisioningState Succeeded, no operation to poll: azcore's
// poller is done on the first answer). With a latency the answer carries
// an Azure-AsyncOperation URL whose status says InProgress until the
// latency has passed, then Succeeded, and until then the resource reads
// provisioningState Updating — cloud-provider-azure polls a scale-set VM
// update every 10 s (pkg/provider/azure_vmss.go 2427-2515). As in the ARM
// emulator (azurearm lro.go), the change is stored when the write is
// accepted; only its completion waits.
// References: ARM's asynchronous operations,
// https://learn.microsoft.com/azure/azure-resource-manager/management/async-operations.

// opPrefix marks the compute side's operation IDs, so that Route claims
// them and leaves the ARM emulator's own to it.
const opPrefix = "compute-"

var opRoute = regexp.MustCompile(`^/subscriptions/[^/]+/providers/microsoft\.(compute|network)/locations/[^/]+/operations/` + opPrefix + `[0-9]+$`)

// kOperation is an operation's status.
const kOperation = "operation"

// pollRetryAfter is the Retry-After of an operation in progress: short, so
// that a test's poller does not wait azcore's default 30 s.
const pollRetryAfter = 10 * time.Millisecond

// opRetention is how long an ended operation stays readable.
const opRetention = time.Minute

// started makes a write's reply long-running when Options.WriteLatency is
// set: the resource (its ID) is Updating until the operation ends. c.mu
// is held.
func (c *Compute) started(req *http.Request, resourceID, provider string, r azurearm.ComputeReply) azurearm.ComputeReply {
	if c.opts.WriteLatency <= 0 || r.Status >= http.StatusBadRequest {
		return r
	}
	now := time.Now()
	for id, end := range c.ops {
		if now.Sub(end) > opRetention {
			delete(c.ops, id)
		}
	}
	c.opSeq++
	id := opPrefix + strconv.FormatUint(c.opSeq, 10)
	end := now.Add(c.opts.WriteLatency)
	c.ops[id] = end
	c.busy[strings.ToLower(resourceID)] = end
	sub := strings.Split(resourceID, "/")[2]
	r.Header.Set("Azure-AsyncOperation", azurearm.BaseURL(req)+"subscriptions/"+sub+"/providers/"+provider+"/locations/"+
		c.opts.Location+"/operations/"+id+"?api-version="+req.URL.Query().Get("api-version"))
	r.Header.Set("Retry-After-Ms", strconv.FormatInt(pollRetryAfter.Milliseconds(), 10))
	r.Body = withState(r.Body, "Updating")
	return r
}

// poll answers an operation's status. c.mu is held.
func (c *Compute) poll(path string) azurearm.ComputeReply {
	id := path[strings.LastIndex(path, "/")+1:]
	end, ok := c.ops[id]
	if !ok {
		return errorReply(http.StatusNotFound, "OperationNotFound", "no operation "+id)
	}
	if time.Now().Before(end) {
		r := docReply(http.StatusOK, map[string]string{"name": id, "status": "InProgress"})
		r.Header.Set("Retry-After-Ms", strconv.FormatInt(pollRetryAfter.Milliseconds(), 10))
		return r
	}
	return docReply(http.StatusOK, map[string]string{"name": id, "status": "Succeeded"})
}

// updating reports whether a write's operation on the resource still runs.
// c.mu is held.
func (c *Compute) updating(resourceID string) bool {
	end, ok := c.busy[strings.ToLower(resourceID)]
	if ok && !time.Now().Before(end) {
		delete(c.busy, strings.ToLower(resourceID))
		return false
	}
	return ok
}

// withState sets a document's properties.provisioningState.
func withState(body []byte, state string) []byte {
	var m map[string]any
	if err := jsonUnmarshal(body, &m); err != nil {
		return body
	}
	props, _ := m["properties"].(map[string]any)
	if props == nil {
		return body
	}
	props["provisioningState"] = state
	return marshal(m)
}
