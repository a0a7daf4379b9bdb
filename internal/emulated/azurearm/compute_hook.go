package azurearm

import (
	"net/http"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// Compute serves the compute side of a cluster — virtual machines, scale
// sets, their instances and network interfaces (package azurecompute) — on
// the emulator's server, and owns the membership of NIC-based backend pools.
// Without one attached the emulator answers the compute routes it knows from
// its own documents (SeedVirtualMachine, an empty list of scale sets).
type Compute interface {
	// Route reports whether the compute side serves a path, and names what
	// it names for the record: its kind and resource group/name.
	Route(path string) (kind, resource string, ok bool)
	// ServeARM answers one authenticated request.
	ServeARM(req *http.Request, body []byte) ComputeReply
	// BackendIPConfigurations lists the IDs of the ipconfigs that name a
	// backend pool (ID compared case-insensitively), sorted.
	BackendIPConfigurations(poolID string) []string
}

// ComputeReply is the compute side's answer; Before and After are the
// stored documents a write changed, for the record.
type ComputeReply struct {
	Status        int
	Header        http.Header
	Body          []byte
	Before, After []byte
}

// AttachCompute routes the compute side's paths to c and derives every
// backend pool's backendIPConfigurations from it; nil detaches.
func (e *Emulator) AttachCompute(c Compute) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.compute = c
}

// serveCompute answers a request the compute side routes; ok is false when
// it does not. Faults are not injected into it.
func (e *Emulator) serveCompute(req *http.Request, body []byte) (*reply, bool) {
	e.mu.Lock()
	c := e.compute
	e.mu.Unlock()
	if c == nil {
		return nil, false
	}
	kind, resource, ok := c.Route(req.URL.Path)
	if !ok {
		return nil, false
	}
	rg, name, _ := strings.Cut(resource, "/")
	t := target{kind: kind, rg: rg, name: name, apiVersion: req.URL.Query().Get("api-version")}
	if rep := checkAuth(req); rep != nil {
		e.record(req, t, rep, nil, nil)
		return rep, true
	}
	// Compute requests take the same buckets (Options.Throttle): ARM
	// throttles before any resource provider.
	if strings.HasPrefix(strings.ToLower(req.URL.Path), "/subscriptions/") {
		t.sub, _, _ = strings.Cut(req.URL.Path[len("/subscriptions/"):], "/")
	}
	if rep, _, _ := e.throttle(req, t); rep != nil {
		e.record(req, t, rep, nil, nil)
		return rep, true
	}
	write := req.Method != http.MethodGet && req.Method != http.MethodHead
	if write {
		e.writeMu.Lock()
		defer e.writeMu.Unlock()
	}
	cr := c.ServeARM(req, body)
	rep := &reply{status: cr.Status, header: cr.Header, body: cr.Body}
	if rep.header == nil {
		rep.header = http.Header{}
	}
	e.record(req, t, rep, cr.Before, cr.After)
	if write && rep.status < http.StatusBadRequest {
		e.mu.Lock()
		e.counters.Writes++
		f := e.onWrite
		e.mu.Unlock()
		if f != nil {
			f()
		}
		e.notify() // a pool's membership may have changed
	} else if !write {
		e.mu.Lock()
		if kind == "operation" {
			e.counters.Polls++ // a long-running write's status
		} else {
			e.counters.Gets++
		}
		e.mu.Unlock()
	}
	return rep, true
}

// withMembership returns a copy of a load balancer whose pools list the
// ipconfigs that name them, as the compute side holds them: ARM derives a
// pool's backendIPConfigurations from the NICs and scale-set VMs (read-only
// in the REST reference, "An array of references to IP addresses defined in
// network interfaces", LoadBalancerBackendAddressPool properties), it never
// takes them from a load-balancer PUT. e.mu is held.
func (e *Emulator) withMembership(lb *armnetwork.LoadBalancer) *armnetwork.LoadBalancer {
	if e.compute == nil || lb == nil || lb.Properties == nil {
		return lb
	}
	out := clone(lb)
	for _, p := range out.Properties.BackendAddressPools {
		setMembership(e.compute, p)
	}
	return out
}

func setMembership(c Compute, p *armnetwork.BackendAddressPool) {
	if p.Properties == nil {
		p.Properties = &armnetwork.BackendAddressPoolPropertiesFormat{}
	}
	p.Properties.BackendIPConfigurations = nil
	for _, id := range c.BackendIPConfigurations(str(p.ID)) {
		p.Properties.BackendIPConfigurations = append(p.Properties.BackendIPConfigurations,
			&armnetwork.InterfaceIPConfiguration{ID: to.Ptr(id)})
	}
}
