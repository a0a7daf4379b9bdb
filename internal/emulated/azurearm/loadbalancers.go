package azurearm

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

const lbType = "Microsoft.Network/loadBalancers"

func lbID(sub, rg, name string) string {
	return "/subscriptions/" + sub + "/resourceGroups/" + rg + "/providers/" + lbType + "/" + name
}

// putLB stores a load balancer document. e.writeMu is held.
func (e *Emulator) putLB(t target, body []byte) *reply {
	var lb armnetwork.LoadBalancer
	if err := json.Unmarshal(body, &lb); err != nil {
		return errorReply(http.StatusBadRequest, "InvalidRequestContent", err.Error())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, existed := e.lbs[lbKey(t.rg, t.name)]
	stored, apiErr := e.storeLB(t.sub, t.rg, t.name, lb)
	if apiErr != nil {
		return apiErrorReply(apiErr)
	}
	stored = e.withMembership(stored)
	if existed {
		return docReply(http.StatusOK, stored)
	}
	return docReply(http.StatusCreated, stored)
}

func (e *Emulator) deleteLB(t target) *reply {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := lbKey(t.rg, t.name)
	lb, ok := e.lbs[key]
	if !ok {
		return &reply{status: http.StatusNoContent, header: http.Header{}}
	}
	e.releaseIPs(lb)
	delete(e.lbs, key)
	return &reply{status: http.StatusAccepted, header: http.Header{}}
}

// putPool replaces one pool of a load balancer: the cheap write for an
// endpoint change. The load balancer and all its children get a new ETag.
func (e *Emulator) putPool(t target, body []byte) *reply {
	var pool armnetwork.BackendAddressPool
	if err := json.Unmarshal(body, &pool); err != nil {
		return errorReply(http.StatusBadRequest, "InvalidRequestContent", err.Error())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	lb, ok := e.lbs[lbKey(t.rg, t.parent)]
	if !ok {
		return errorReply(http.StatusNotFound, "ParentResourceNotFound", "load balancer "+t.parent+" not found")
	}
	pool.Name = to.Ptr(t.name)
	if !childName.MatchString(t.name) {
		return errorReply(http.StatusBadRequest, "InvalidResourceName", "pool "+t.name)
	}
	if apiErr := validatePool(&pool); apiErr != nil {
		return apiErrorReply(apiErr)
	}
	next := clone(lb)
	props := next.Properties
	replaced := false
	for i, p := range props.BackendAddressPools {
		if strings.EqualFold(str(p.Name), t.name) {
			props.BackendAddressPools[i], replaced = &pool, true
		}
	}
	if !replaced {
		props.BackendAddressPools = append(props.BackendAddressPools, &pool)
	}
	stored, apiErr := e.storeLB(t.sub, t.rg, *lb.Name, *next)
	if apiErr != nil {
		return apiErrorReply(apiErr)
	}
	status := http.StatusOK
	if !replaced {
		status = http.StatusCreated
	}
	return docReply(status, findPool(e.withMembership(stored), t.name))
}

// deletePool removes a pool no rule uses.
func (e *Emulator) deletePool(t target) *reply {
	e.mu.Lock()
	defer e.mu.Unlock()
	lb, ok := e.lbs[lbKey(t.rg, t.parent)]
	if !ok || findPool(lb, t.name) == nil {
		return &reply{status: http.StatusNoContent, header: http.Header{}}
	}
	next := clone(lb)
	next.Properties.BackendAddressPools = slices.DeleteFunc(next.Properties.BackendAddressPools,
		func(p *armnetwork.BackendAddressPool) bool { return strings.EqualFold(str(p.Name), t.name) })
	if _, apiErr := e.storeLB(t.sub, t.rg, *lb.Name, *next); apiErr != nil {
		return apiErrorReply(apiErr)
	}
	return &reply{status: http.StatusAccepted, header: http.Header{}}
}

// listLBs answers the list of a resource group's load balancers.
func (e *Emulator) listLBs(t target) *reply {
	var out []*armnetwork.LoadBalancer
	for _, lb := range e.lbs {
		if strings.EqualFold(resourceGroupOf(*lb.ID), t.rg) {
			out = append(out, e.withMembership(lb))
		}
	}
	slices.SortFunc(out, func(a, b *armnetwork.LoadBalancer) int { return strings.Compare(lower(a.Name), lower(b.Name)) })
	return listReply(out)
}

// docReply is a document as JSON.
func docReply[T any](status int, doc *T) *reply {
	b, err := json.Marshal(doc)
	if err != nil {
		return errorReply(http.StatusInternalServerError, "InternalServerError", err.Error())
	}
	return jsonReply(status, b)
}

// listReply is ARM's list page: every item in value, no nextLink.
func listReply[T any](items []T) *reply {
	if items == nil {
		items = []T{}
	}
	b, err := json.Marshal(map[string]any{"value": items})
	if err != nil {
		return errorReply(http.StatusInternalServerError, "InternalServerError", err.Error())
	}
	return jsonReply(http.StatusOK, b)
}

// resourceGroupOf is the resource group an ID names.
func resourceGroupOf(id string) string {
	parts := strings.Split(id, "/")
	for i := 0; i+1 < len(parts); i++ {
		if strings.EqualFold(parts[i], "resourceGroups") {
			return parts[i+1]
		}
	}
	return ""
}

func findPool(lb *armnetwork.LoadBalancer, name string) *armnetwork.BackendAddressPool {
	if lb == nil || lb.Properties == nil {
		return nil
	}
	for _, p := range lb.Properties.BackendAddressPools {
		if strings.EqualFold(str(p.Name), name) {
			return p
		}
	}
	return nil
}

// storeLB validates a load balancer document, fills in what the server owns
// (IDs, ETags, addresses, provisioning state, back-references) and stores
// it. e.mu is held.
func (e *Emulator) storeLB(sub, rg, name string, body armnetwork.LoadBalancer) (*armnetwork.LoadBalancer, *apiError) {
	key := lbKey(rg, name)
	old := e.lbs[key]
	lb := clone(&body)
	id := ids{lb: lbID(sub, rg, name)}
	lb.ID, lb.Name, lb.Type = to.Ptr(id.lb), to.Ptr(name), to.Ptr(lbType)
	if lb.Location == nil {
		if old == nil {
			return nil, badRequest("LocationRequired")
		}
		lb.Location = old.Location
	}
	if lb.SKU == nil {
		lb.SKU = &armnetwork.LoadBalancerSKU{Name: to.Ptr(armnetwork.LoadBalancerSKUNameStandard)}
	}
	if apiErr := validateTags(lb.Tags); apiErr != nil {
		return nil, apiErr
	}
	if lb.Properties == nil {
		lb.Properties = &armnetwork.LoadBalancerPropertiesFormat{}
	}
	p := lb.Properties
	if apiErr := checkLimits(e.opts.Limits, id.lb, p); apiErr != nil {
		return nil, apiErr
	}
	var feNames, poolNames, probeNames, ruleNames []*string
	for _, f := range p.FrontendIPConfigurations {
		feNames = append(feNames, f.Name)
	}
	for _, x := range p.BackendAddressPools {
		poolNames = append(poolNames, x.Name)
	}
	for _, x := range p.Probes {
		probeNames = append(probeNames, x.Name)
	}
	for _, x := range p.LoadBalancingRules {
		ruleNames = append(ruleNames, x.Name)
	}
	frontends, apiErr := checkNames("frontendIPConfiguration", feNames)
	if apiErr != nil {
		return nil, apiErr
	}
	pools, apiErr := checkNames("backendAddressPool", poolNames)
	if apiErr != nil {
		return nil, apiErr
	}
	probes, apiErr := checkNames("probe", probeNames)
	if apiErr != nil {
		return nil, apiErr
	}
	if _, apiErr := checkNames("loadBalancingRule", ruleNames); apiErr != nil {
		return nil, apiErr
	}
	for _, x := range p.Probes {
		if apiErr := validateProbe(x); apiErr != nil {
			return nil, apiErr
		}
	}
	for _, x := range p.BackendAddressPools {
		if apiErr := validatePool(x); apiErr != nil {
			return nil, apiErr
		}
	}
	if apiErr := validateRules(id, p.LoadBalancingRules, frontends, pools, probes); apiErr != nil {
		return nil, apiErr
	}
	addrs, apiErr := e.assignIPs(id, old, p.FrontendIPConfigurations)
	if apiErr != nil {
		return nil, apiErr
	}
	// Committed: swap the frontend addresses over.
	if old != nil {
		e.releaseIPs(old)
	}
	for addr, fe := range addrs {
		e.ips[addr] = fe
	}
	fillServerFields(id, lb)
	setEtag(lb, e.nextEtag())
	e.lbs[key] = lb
	return lb, nil
}

// assignIPs gives every frontend its private address: a static one as
// asked, a dynamic one kept from before or the lowest free of the prefix.
func (e *Emulator) assignIPs(id ids, old *armnetwork.LoadBalancer, fes []*armnetwork.FrontendIPConfiguration) (map[netip.Addr]string, *apiError) {
	prev := map[string]string{} // frontend name → address it had
	mine := map[netip.Addr]bool{}
	if old != nil && old.Properties != nil {
		for _, f := range old.Properties.FrontendIPConfigurations {
			if f.Properties != nil && f.Properties.PrivateIPAddress != nil {
				prev[strings.ToLower(*f.Name)] = *f.Properties.PrivateIPAddress
				if a, err := netip.ParseAddr(*f.Properties.PrivateIPAddress); err == nil {
					mine[a] = true
				}
			}
		}
	}
	taken := func(a netip.Addr, out map[netip.Addr]string) bool {
		_, usedHere := out[a]
		_, usedElsewhere := e.ips[a]
		return usedHere || usedElsewhere && !mine[a]
	}
	out := map[netip.Addr]string{}
	for _, f := range fes {
		fp := f.Properties
		if fp == nil || (fp.Subnet == nil || fp.Subnet.ID == nil) && fp.PublicIPAddress == nil {
			return nil, badRequest("InvalidFrontendIPConfiguration: %s needs a subnet or a public IP", *f.Name)
		}
		if fp.PublicIPAddress != nil {
			continue // the public IP resource holds its own address
		}
		feID := id.child("frontendIPConfigurations", *f.Name)
		var addr netip.Addr
		if fp.PrivateIPAllocationMethod != nil && *fp.PrivateIPAllocationMethod == armnetwork.IPAllocationMethodStatic {
			a, err := netip.ParseAddr(str(fp.PrivateIPAddress))
			if err != nil || !e.opts.AddressPrefix.Contains(a) {
				return nil, badRequest("PrivateIPAddressNotInSubnet: %s: %q", *f.Name, str(fp.PrivateIPAddress))
			}
			if taken(a, out) {
				return nil, &apiError{status: http.StatusBadRequest, code: "PrivateIPAddressInUse: " + a.String()}
			}
			addr = a
		} else if p, ok := prev[strings.ToLower(*f.Name)]; ok {
			addr = netip.MustParseAddr(p)
		} else {
			for a := e.opts.AddressPrefix.Masked().Addr().Next(); e.opts.AddressPrefix.Contains(a); a = a.Next() {
				if !taken(a, out) {
					addr = a
					break
				}
			}
			if !addr.IsValid() {
				return nil, &apiError{status: http.StatusBadRequest, code: "SubnetIsFull"}
			}
			fp.PrivateIPAllocationMethod = to.Ptr(armnetwork.IPAllocationMethodDynamic)
		}
		fp.PrivateIPAddress = to.Ptr(addr.String())
		fp.PrivateIPAddressVersion = to.Ptr(armnetwork.IPVersionIPv4)
		out[addr] = feID
	}
	return out, nil
}

func (e *Emulator) releaseIPs(lb *armnetwork.LoadBalancer) {
	if lb.Properties == nil {
		return
	}
	for _, f := range lb.Properties.FrontendIPConfigurations {
		if f.Properties != nil && f.Properties.PrivateIPAddress != nil {
			if a, err := netip.ParseAddr(*f.Properties.PrivateIPAddress); err == nil {
				delete(e.ips, a)
			}
		}
	}
}
