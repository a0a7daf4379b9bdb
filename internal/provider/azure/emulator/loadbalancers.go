package emulator

import (
	"context"
	"net/http"
	"net/netip"
	"strings"

	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

const lbType = "Microsoft.Network/loadBalancers"

func lbID(sub, rg, name string) string {
	return "/subscriptions/" + sub + "/resourceGroups/" + rg + "/providers/" + lbType + "/" + name
}

func (e *Emulator) getLB(ctx context.Context, rg, name string, _ *armnetwork.LoadBalancersClientGetOptions) (
	resp azfake.Responder[armnetwork.LoadBalancersClientGetResponse], errResp azfake.ErrorResponder) {
	e.mu.Lock()
	defer e.mu.Unlock()
	lb, ok := e.lbs[lbKey(rg, name)]
	if !ok {
		errResp.SetResponseError(http.StatusNotFound, "ResourceNotFound")
		return
	}
	resp.SetResponse(http.StatusOK, armnetwork.LoadBalancersClientGetResponse{LoadBalancer: *clone(lb)}, nil)
	return
}

func (e *Emulator) putLB(ctx context.Context, rg, name string, body armnetwork.LoadBalancer, _ *armnetwork.LoadBalancersClientBeginCreateOrUpdateOptions) (
	resp azfake.PollerResponder[armnetwork.LoadBalancersClientCreateOrUpdateResponse], errResp azfake.ErrorResponder) {
	info := infoFrom(ctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	_, existed := e.lbs[lbKey(rg, name)]
	stored, apiErr := e.storeLB(info.subscription, rg, name, body)
	if apiErr != nil {
		errResp.SetResponseError(apiErr.status, apiErr.code)
		return
	}
	e.counters.Writes++
	status := http.StatusOK
	if !existed {
		status = http.StatusCreated
	}
	for i := 0; i < e.pollSteps(info); i++ {
		resp.AddNonTerminalResponse(status, nil)
	}
	resp.SetTerminalResponse(http.StatusOK, armnetwork.LoadBalancersClientCreateOrUpdateResponse{LoadBalancer: *clone(stored)}, nil)
	return
}

func (e *Emulator) deleteLB(ctx context.Context, rg, name string, _ *armnetwork.LoadBalancersClientBeginDeleteOptions) (
	resp azfake.PollerResponder[armnetwork.LoadBalancersClientDeleteResponse], errResp azfake.ErrorResponder) {
	info := infoFrom(ctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	key := lbKey(rg, name)
	if lb, ok := e.lbs[key]; ok {
		e.releaseIPs(lb)
		delete(e.lbs, key)
		e.counters.Writes++
	}
	for i := 0; i < e.pollSteps(info); i++ {
		resp.AddNonTerminalResponse(http.StatusAccepted, nil)
	}
	resp.SetTerminalResponse(http.StatusOK, armnetwork.LoadBalancersClientDeleteResponse{}, nil)
	return
}

func (e *Emulator) getPool(ctx context.Context, rg, lbName, pool string, _ *armnetwork.LoadBalancerBackendAddressPoolsClientGetOptions) (
	resp azfake.Responder[armnetwork.LoadBalancerBackendAddressPoolsClientGetResponse], errResp azfake.ErrorResponder) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p := findPool(e.lbs[lbKey(rg, lbName)], pool); p != nil {
		resp.SetResponse(http.StatusOK, armnetwork.LoadBalancerBackendAddressPoolsClientGetResponse{BackendAddressPool: *clone(p)}, nil)
		return
	}
	errResp.SetResponseError(http.StatusNotFound, "ResourceNotFound")
	return
}

// putPool replaces one pool of a load balancer: the cheap write for an
// endpoint change. The load balancer and all its children get a new ETag.
func (e *Emulator) putPool(ctx context.Context, rg, lbName, pool string, body armnetwork.BackendAddressPool, _ *armnetwork.LoadBalancerBackendAddressPoolsClientBeginCreateOrUpdateOptions) (
	resp azfake.PollerResponder[armnetwork.LoadBalancerBackendAddressPoolsClientCreateOrUpdateResponse], errResp azfake.ErrorResponder) {
	info := infoFrom(ctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	lb, ok := e.lbs[lbKey(rg, lbName)]
	if !ok {
		errResp.SetResponseError(http.StatusNotFound, "ParentResourceNotFound")
		return
	}
	body.Name = to.Ptr(pool)
	if !childName.MatchString(pool) {
		errResp.SetResponseError(http.StatusBadRequest, "InvalidResourceName: pool "+pool)
		return
	}
	if apiErr := validatePool(&body); apiErr != nil {
		errResp.SetResponseError(apiErr.status, apiErr.code)
		return
	}
	next := clone(lb)
	props := next.Properties
	replaced := false
	for i, p := range props.BackendAddressPools {
		if strings.EqualFold(str(p.Name), pool) {
			props.BackendAddressPools[i], replaced = &body, true
		}
	}
	if !replaced {
		props.BackendAddressPools = append(props.BackendAddressPools, &body)
	}
	stored, apiErr := e.storeLB(info.subscription, rg, *lb.Name, *next)
	if apiErr != nil {
		errResp.SetResponseError(apiErr.status, apiErr.code)
		return
	}
	e.counters.Writes++
	for i := 0; i < e.pollSteps(info); i++ {
		resp.AddNonTerminalResponse(http.StatusOK, nil)
	}
	resp.SetTerminalResponse(http.StatusOK, armnetwork.LoadBalancerBackendAddressPoolsClientCreateOrUpdateResponse{
		BackendAddressPool: *clone(findPool(stored, pool))}, nil)
	return
}

func (e *Emulator) pollSteps(info reqInfo) int {
	if info.slow {
		return e.opts.PollSteps + 3
	}
	return e.opts.PollSteps
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
