package azuredp

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
)

// The probe state as the data plane has it, for the lab and for the
// emulator's rule-health operation (which adds its own lag).

// Backend is one backend address of a rule as the data plane sees it.
type Backend struct {
	Addr netip.Addr
	// ProbeUp is the probe's state (false before the first success; true
	// for a rule without a probe).
	ProbeUp bool
	// Admin is the address's admin state: None, Up or Down.
	Admin string
	// Eligible: the programmed ruleset sends it new flows (probe, admin
	// state and noHealthyBackendsBehavior together).
	Eligible bool
	// Detail is the last probe's result.
	Detail string
	// IPConfig is the NIC ipconfig ID of a NIC-based pool's member ("" for
	// an address of an IP-based pool).
	IPConfig string
}

// ErrUnknownRule: the rule is not programmed (not stored, not yet
// propagated, or not modelled).
var ErrUnknownRule = errors.New("azuredp: no such rule programmed")

// Health is each backend address of a rule as the data plane has it now:
// the rule as last programmed (after propagation), each address's probe
// state as last probed, and whether the programmed ruleset sends it new
// flows (a probe change reaches the ruleset a moment after the probe).
func (d *DataPlane) Health(loadBalancer, ruleName string) ([]Backend, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := ruleKey{strings.ToLower(loadBalancer), strings.ToLower(ruleName)}
	for _, r := range d.view.rules {
		if r.key() != k {
			continue
		}
		elig := d.elig[k]
		var out []Backend
		for _, b := range r.Backends {
			x := Backend{Addr: b.Addr, Admin: b.Admin, ProbeUp: true, Eligible: slices.Contains(elig, b.Addr), Detail: "no probe", IPConfig: b.IPConfig}
			if r.Probe != "" {
				h := d.health[target{r.probeKey(), b.Addr}]
				x.ProbeUp = h != nil && h.up
				if h != nil {
					x.Detail = h.last
				}
			}
			out = append(out, x)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: %s/%s", ErrUnknownRule, loadBalancer, ruleName)
}

// RuleHealth answers the emulator's rule-health operation
// (azurearm.RuleHealth): Up where new flows may go, Down otherwise, with the
// probe's result or the admin state as the reason. A rule ARM has but the
// data plane has not programmed yet (propagation) has no probe data: the
// answer lists no address. That is an assumption — ARM's documentation
// does not say what the operation answers then — chosen as the one that
// claims nothing: no address Up, none Down.
func (d *DataPlane) RuleHealth(resourceGroup, loadBalancer, ruleName string) ([]azurearm.BackendHealth, error) {
	if !strings.EqualFold(resourceGroup, d.cfg.ResourceGroup) {
		return nil, fmt.Errorf("%w: resource group %s is not %s", ErrUnknownRule, resourceGroup, d.cfg.ResourceGroup)
	}
	bs, err := d.Health(loadBalancer, ruleName)
	if errors.Is(err, ErrUnknownRule) {
		return []azurearm.BackendHealth{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]azurearm.BackendHealth, 0, len(bs))
	for _, b := range bs {
		// A NIC-based pool's member is named by its ipconfig
		// (networkInterfaceIPConfigurationId), an IP-based pool's by its
		// address. The ipconfig's address is left out: no public source
		// says ARM answers it for such a member, and a reader that keyed
		// NIC members by it would pass here and fail on Azure.
		h := azurearm.BackendHealth{IPAddress: b.Addr.String(), State: "Down", Reason: b.Detail}
		if b.IPConfig != "" {
			h.IPAddress, h.IPConfigurationID = "", b.IPConfig
		}
		if b.Eligible {
			h.State = "Up"
		}
		if b.Admin != adminNone {
			h.Reason = "admin state " + b.Admin + "; " + b.Detail
		}
		out = append(out, h)
	}
	return out, nil
}

// HealthAt is Health of the rule that takes frontend:port (the lab knows a
// Service by the address and port its status and spec give, not by the rule
// name its writer chose), with the rule's backend port.
func (d *DataPlane) HealthAt(frontend netip.Addr, port uint16) (backendPort uint16, bs []Backend, err error) {
	var lb, rule string
	d.mu.Lock()
	for _, r := range d.view.rules {
		if r.Frontend == frontend && r.Port == port {
			lb, rule, backendPort = r.LB, r.Name, r.BackendPort
			break
		}
	}
	d.mu.Unlock()
	if rule == "" {
		return 0, nil, fmt.Errorf("%w: none takes %s", ErrUnknownRule, netip.AddrPortFrom(frontend, port))
	}
	bs, err = d.Health(lb, rule)
	return backendPort, bs, err
}

// AdminDown reports whether the address's admin state is Down: no new
// flows whatever its probe (zerodrop's drain).
func (b Backend) AdminDown() bool { return b.Admin == adminDown }
