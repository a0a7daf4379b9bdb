// Package azurecompute is the compute side of the emulated Azure: virtual
// machines (standalone or in availability sets) with their network
// interfaces, Uniform virtual machine scale sets with their instances and
// the instances' network interfaces. It owns the membership of NIC-based
// load-balancer backend pools: the ipconfigs whose
// loadBalancerBackendAddressPools name a pool are its members, and the ARM
// emulator (package azurearm, AttachCompute) shows them as the pool's
// read-only backendIPConfigurations. It is served by the ARM emulator's
// server, for tests and the lab only.
//
// What it models follows cloud-provider-azure's calls for the default
// configuration (vmType vmss, nodeIPConfiguration pools), read from its
// public code at v1.36.3 (pkg/provider/azure_vmss.go, azure_standard.go,
// azure_vmss_cache.go) and the REST reference as the armcompute v7.3.0 and
// armnetwork v7 models carry it.
package azurecompute

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
)

// Options configure a Compute. Zero values get defaults.
type Options struct {
	// Location is the region of every resource (default westeurope, the
	// ARM emulator's).
	Location string
	// WriteLatency, when set, is how long a write's operation runs
	// (lro.go); zero: writes end at once.
	WriteLatency time.Duration
}

// Compute is the in-memory compute side. The zero value is not usable;
// call New.
type Compute struct {
	opts Options

	mu      sync.Mutex
	etagSeq uint64
	vms     map[string]*armcompute.VirtualMachine // by lower(rg/name)
	nics    map[string]*armnetwork.Interface      // by lower(rg/name)
	sets    map[string]*scaleSet                  // by lower(rg/name)
	// ops are the running and recently ended operations, by ID, with
	// their end; busy the end of the operation on a resource, by lower(ID).
	ops   map[string]time.Time
	busy  map[string]time.Time
	opSeq uint64
}

// scaleSet is a Uniform scale set: its model and its instances.
type scaleSet struct {
	model     *armcompute.VirtualMachineScaleSet
	instances map[string]*instance // by instance ID
}

// instance is one scale-set VM and the private address of its primary
// ipconfig (ARM's network side holds it; the VM document does not).
type instance struct {
	vm *armcompute.VirtualMachineScaleSetVM
	ip string
}

var _ azurearm.Compute = (*Compute)(nil)

// New returns an empty compute side.
func New(opts Options) *Compute {
	if opts.Location == "" {
		opts.Location = "westeurope"
	}
	return &Compute{opts: opts, vms: map[string]*armcompute.VirtualMachine{},
		nics: map[string]*armnetwork.Interface{}, sets: map[string]*scaleSet{},
		ops: map[string]time.Time{}, busy: map[string]time.Time{}}
}

// Route kinds.
const (
	kVMs      = "virtualMachines"
	kVM       = "virtualMachine"
	kAvSets   = "availabilitySets"
	kVMSSes   = "virtualMachineScaleSets"
	kVMSS     = "virtualMachineScaleSet"
	kVMSSVMs  = "virtualMachineScaleSetVMs"
	kVMSSVM   = "virtualMachineScaleSetVM"
	kVMSSNICs = "virtualMachineScaleSetVMNetworkInterfaces"
	kVMSSNIC  = "virtualMachineScaleSetVMNetworkInterface"
	kNICs     = "networkInterfaces"
	kNIC      = "networkInterface"
)

const (
	subRG = `^/subscriptions/([^/]+)/resourcegroups/([^/]+)/providers/`
	cpt   = subRG + `microsoft\.compute/`
	vmss  = cpt + `virtualmachinescalesets/([^/]+)`
)

// routes are matched on the lower-cased path (the SDK spells the scale-set
// NIC paths "microsoft.Compute", armnetwork v7 interfaces_client.go); the
// names are cut from the original path.
var routes = []struct {
	re   *regexp.Regexp
	kind string
}{
	{regexp.MustCompile(cpt + `virtualmachines$`), kVMs},
	{regexp.MustCompile(cpt + `virtualmachines/([^/]+)$`), kVM},
	{regexp.MustCompile(cpt + `availabilitysets$`), kAvSets},
	{regexp.MustCompile(cpt + `virtualmachinescalesets$`), kVMSSes},
	{regexp.MustCompile(vmss + `$`), kVMSS},
	{regexp.MustCompile(vmss + `/virtualmachines$`), kVMSSVMs},
	{regexp.MustCompile(vmss + `/virtualmachines/([^/]+)$`), kVMSSVM},
	{regexp.MustCompile(vmss + `/virtualmachines/([^/]+)/networkinterfaces$`), kVMSSNICs},
	{regexp.MustCompile(vmss + `/virtualmachines/([^/]+)/networkinterfaces/([^/]+)$`), kVMSSNIC},
	{regexp.MustCompile(subRG + `microsoft\.network/networkinterfaces$`), kNICs},
	{regexp.MustCompile(subRG + `microsoft\.network/networkinterfaces/([^/]+)$`), kNIC},
}

// target is what a path names: names[0] is the subscription, names[1] the
// resource group, then the resource's names from the outside in.
type target struct {
	kind  string
	names []string
}

func parse(path string) (target, bool) {
	p := strings.TrimSuffix(path, "/")
	lp := strings.ToLower(p)
	for _, r := range routes {
		idx := r.re.FindStringSubmatchIndex(lp)
		if idx == nil {
			continue
		}
		t := target{kind: r.kind}
		for i := 2; i < len(idx); i += 2 {
			t.names = append(t.names, p[idx[i]:idx[i+1]])
		}
		return t, true
	}
	return target{}, false
}

func (t target) sub() string { return t.names[0] }
func (t target) rg() string  { return t.names[1] }

// key is the store key of the outermost named resource.
func (t target) key() string { return key(t.rg(), t.names[2]) }

func key(rg, name string) string { return strings.ToLower(rg + "/" + name) }

// Route implements azurearm.Compute.
func (c *Compute) Route(path string) (kind, resource string, ok bool) {
	if opRoute.MatchString(strings.ToLower(strings.TrimSuffix(path, "/"))) {
		return kOperation, path[strings.LastIndex(path, "/")+1:], true
	}
	t, ok := parse(path)
	if !ok {
		return "", "", false
	}
	return t.kind, strings.Join(t.names[1:], "/"), true
}

// API versions answered: cloud-provider-azure's compute clients per release
// (2025-04-01 at v1.36.3, 2024-11-01 at v1.33–v1.35, 2024-07-01 before; the
// armcompute v7.3.0 clients send 2025-04-01), its network clients' (2025-05-01
// armnetwork v9, 2025-01-01 armnetwork v7, 2024-05-01 older releases), and
// the scale-set VM NIC API's only version, 2018-10-01 (armnetwork v7
// interfaces_client.go, GetVirtualMachineScaleSetNetworkInterface).
var (
	computeVersions = []string{"2024-07-01", "2024-11-01", "2025-04-01"}
	nicVersions     = []string{"2024-05-01", "2025-01-01", "2025-05-01"}
	vmssNICVersions = []string{"2018-10-01"}
)

func (t target) versions() []string {
	switch t.kind {
	case kNIC, kNICs:
		return nicVersions
	case kVMSSNIC, kVMSSNICs:
		return vmssNICVersions
	}
	return computeVersions
}

// ServeARM implements azurearm.Compute.
func (c *Compute) ServeARM(req *http.Request, body []byte) azurearm.ComputeReply {
	if opRoute.MatchString(strings.ToLower(strings.TrimSuffix(req.URL.Path, "/"))) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.poll(strings.TrimSuffix(req.URL.Path, "/"))
	}
	t, ok := parse(req.URL.Path)
	if !ok {
		return errorReply(http.StatusNotFound, "NoRegisteredProviderFound", "no compute API at "+req.URL.Path)
	}
	if v := req.URL.Query().Get("api-version"); !slices.Contains(t.versions(), v) {
		return errorReply(http.StatusBadRequest, "InvalidApiVersionParameter",
			"The api-version '"+v+"' is invalid. The supported versions are '"+strings.Join(t.versions(), "','")+"'.")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	expand := strings.EqualFold(req.URL.Query().Get("$expand"), "instanceView")
	switch req.Method {
	case http.MethodGet:
		return c.get(t, expand, req.URL.Query().Get("$filter"))
	case http.MethodPut:
		switch t.kind {
		case kVMSS:
			return c.started(req, c.idOf(t), "Microsoft.Compute", c.putVMSS(t, body, req.Header.Get("If-Match")))
		case kVMSSVM:
			return c.started(req, c.idOf(t), "Microsoft.Compute", c.putVMSSVM(t, body, req.Header.Get("If-Match")))
		case kNIC:
			return c.started(req, c.idOf(t), "Microsoft.Network", c.putNIC(t, body, req.Header.Get("If-Match")))
		}
	}
	return errorReply(http.StatusMethodNotAllowed, "MethodNotAllowed", "emulator: "+req.Method+" is not served on "+t.kind)
}

func (c *Compute) get(t target, expand bool, filter string) azurearm.ComputeReply {
	switch t.kind {
	case kVMs:
		return c.listVMs(t, expand, filter)
	case kVM:
		return c.getVM(t, expand)
	case kAvSets:
		return c.listAvailabilitySets(t)
	case kVMSSes:
		return c.listVMSS(t)
	case kVMSS:
		if s, ok := c.sets[t.key()]; ok {
			return c.stateReply(s.model.ID, docReply(http.StatusOK, s.model))
		}
	case kVMSSVMs:
		return c.listVMSSVMs(t, expand)
	case kVMSSVM:
		if in := c.instance(t); in != nil {
			return c.stateReply(in.vm.ID, docReply(http.StatusOK, viewOf(in, expand)))
		}
	case kVMSSNICs:
		if in := c.instance(t); in != nil {
			return listReply(c.instanceNICs(in))
		}
	case kVMSSNIC:
		if in := c.instance(t); in != nil {
			for _, n := range c.instanceNICs(in) {
				if strings.EqualFold(*n.Name, t.names[4]) {
					return docReply(http.StatusOK, n)
				}
			}
		}
	case kNICs:
		return c.listNICs(t)
	case kNIC:
		if n, ok := c.nics[t.key()]; ok {
			return c.stateReply(n.ID, docReply(http.StatusOK, n))
		}
	}
	return notFound(t)
}

// nextEtag is a new ETag: compute and network resources return one on
// every read and change it on every write ("Etag is property returned in
// Create/Update/Get response of the VMSS VM, so that customer can supply it
// in the header to ensure optimistic updates", armcompute v7.3.0 models.go).
func (c *Compute) nextEtag() string {
	c.etagSeq++
	return `"` + strconv.FormatUint(c.etagSeq, 10) + `"`
}

// precondition refuses a write whose If-Match names another ETag, as ARM
// does with 412 (the If-Match header of VirtualMachineScaleSetVMs_Update and
// VirtualMachineScaleSets_CreateOrUpdate, armcompute v7.3.0 options.go;
// cloud-provider-azure sends the body's etag there, pkg/azclient/policy/etag/etag.go).
func precondition(ifMatch, current string) *azurearm.ComputeReply {
	if ifMatch == "" || ifMatch == "*" || ifMatch == current {
		return nil
	}
	r := errorReply(http.StatusPreconditionFailed, "PreconditionFailed",
		"ETag "+current+" does not match If-Match "+ifMatch)
	return &r
}

func errorReply(status int, code, msg string) azurearm.ComputeReply {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	h := http.Header{"Content-Type": {"application/json; charset=utf-8"}, "X-Ms-Error-Code": {code}}
	return azurearm.ComputeReply{Status: status, Header: h, Body: b}
}

func notFound(t target) azurearm.ComputeReply {
	return errorReply(http.StatusNotFound, "ResourceNotFound",
		fmt.Sprintf("The Resource '%s/%s' under resource group '%s' was not found.", t.kind, strings.Join(t.names[2:], "/"), t.rg()))
}

func docReply(status int, v any) azurearm.ComputeReply {
	b, err := json.Marshal(v)
	if err != nil {
		return errorReply(http.StatusInternalServerError, "InternalServerError", err.Error())
	}
	return azurearm.ComputeReply{Status: status, Header: http.Header{"Content-Type": {"application/json; charset=utf-8"}}, Body: b}
}

// listReply is ARM's list page: every item in value, no nextLink.
func listReply[T any](items []T) azurearm.ComputeReply {
	if items == nil {
		items = []T{}
	}
	return docReply(http.StatusOK, map[string]any{"value": items})
}

// clone deep-copies a document through its JSON form.
func clone[T any](v *T) *T {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("azurecompute: marshal %T: %v", v, err))
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		panic(fmt.Sprintf("azurecompute: unmarshal %T: %v", v, err))
	}
	return out
}

// idOf is the ID of the resource a write names, "" when it does not exist.
func (c *Compute) idOf(t target) string {
	switch t.kind {
	case kVMSS:
		if s, ok := c.sets[t.key()]; ok {
			return *s.model.ID
		}
	case kVMSSVM:
		if in := c.instance(t); in != nil {
			return *in.vm.ID
		}
	case kNIC:
		if n, ok := c.nics[t.key()]; ok {
			return *n.ID
		}
	}
	return ""
}

// stateReply shows a resource Updating while a write's operation on it
// runs (lro.go). Lists show the stored state.
func (c *Compute) stateReply(id *string, r azurearm.ComputeReply) azurearm.ComputeReply {
	if id != nil && c.updating(*id) {
		r.Body = withState(r.Body, "Updating")
	}
	return r
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func marshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
