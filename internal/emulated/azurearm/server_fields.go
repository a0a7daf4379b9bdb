package azurearm

import (
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// fillServerFields sets what ARM owns in a stored document: child IDs and
// types, provisioning states and the read-only back-references from
// frontends, pools and probes to the rules that use them.
func fillServerFields(id ids, lb *armnetwork.LoadBalancer) {
	p := lb.Properties
	p.ProvisioningState = to.Ptr(armnetwork.ProvisioningStateSucceeded)
	succeeded := to.Ptr(armnetwork.ProvisioningStateSucceeded)
	feRules := map[string][]*armnetwork.SubResource{}
	poolRules := map[string][]*armnetwork.SubResource{}
	probeRules := map[string][]*armnetwork.SubResource{}
	for _, r := range p.LoadBalancingRules {
		r.ID = to.Ptr(id.child("loadBalancingRules", *r.Name))
		r.Type = to.Ptr(lbType + "/loadBalancingRules")
		r.Properties.ProvisioningState = succeeded
		ref := &armnetwork.SubResource{ID: r.ID}
		if n, ok := id.ref(r.Properties.FrontendIPConfiguration, "frontendIPConfigurations"); ok {
			feRules[n] = append(feRules[n], ref)
		}
		if n, ok := id.ref(r.Properties.BackendAddressPool, "backendAddressPools"); ok {
			poolRules[n] = append(poolRules[n], ref)
		}
		if n, ok := id.ref(r.Properties.Probe, "probes"); ok {
			probeRules[n] = append(probeRules[n], ref)
		}
	}
	for _, f := range p.FrontendIPConfigurations {
		f.ID = to.Ptr(id.child("frontendIPConfigurations", *f.Name))
		f.Type = to.Ptr(lbType + "/frontendIPConfigurations")
		f.Properties.ProvisioningState = succeeded
		f.Properties.LoadBalancingRules = feRules[lower(f.Name)]
	}
	for _, x := range p.BackendAddressPools {
		x.ID = to.Ptr(id.child("backendAddressPools", *x.Name))
		x.Type = to.Ptr(lbType + "/backendAddressPools")
		if x.Properties == nil {
			x.Properties = &armnetwork.BackendAddressPoolPropertiesFormat{}
		}
		x.Properties.ProvisioningState = succeeded
		x.Properties.LoadBalancingRules = poolRules[lower(x.Name)]
		// Read-only: derived from the NICs and scale-set VMs on every read
		// (compute_hook.go), never stored from a PUT body.
		x.Properties.BackendIPConfigurations = nil
	}
	for _, x := range p.Probes {
		x.ID = to.Ptr(id.child("probes", *x.Name))
		x.Type = to.Ptr(lbType + "/probes")
		x.Properties.ProvisioningState = succeeded
		x.Properties.LoadBalancingRules = probeRules[lower(x.Name)]
	}
}

// setEtag gives the load balancer and every child the same new ETag: the
// network resource provider versions a load balancer as one document, so a
// write to any part changes the ETag of all parts.
func setEtag(lb *armnetwork.LoadBalancer, etag string) {
	lb.Etag = to.Ptr(etag)
	p := lb.Properties
	if p == nil {
		return
	}
	for _, x := range p.FrontendIPConfigurations {
		x.Etag = to.Ptr(etag)
	}
	for _, x := range p.BackendAddressPools {
		x.Etag = to.Ptr(etag)
	}
	for _, x := range p.Probes {
		x.Etag = to.Ptr(etag)
	}
	for _, x := range p.LoadBalancingRules {
		x.Etag = to.Ptr(etag)
	}
}

func lower(s *string) string {
	b := []byte(str(s))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
