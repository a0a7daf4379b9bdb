package azure

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/model"
)

// ports lists Services (namespace/name) with how many ports each has.
type ports map[string]int

// stored is a load balancer document as zerodrop writes it for on, plus
// children zerodrop does not own.
func stored(on ports, foreignFrontends, foreignRules, natRules int) *armnetwork.LoadBalancer {
	p := &armnetwork.LoadBalancerPropertiesFormat{}
	for i := range foreignFrontends {
		p.FrontendIPConfigurations = append(p.FrontendIPConfigurations, &armnetwork.FrontendIPConfiguration{Name: to.Ptr(fmt.Sprintf("kube-fe-%d", i))})
	}
	for i := range foreignRules {
		p.LoadBalancingRules = append(p.LoadBalancingRules, &armnetwork.LoadBalancingRule{Name: to.Ptr(fmt.Sprintf("kube-rule-%d", i))})
	}
	for i := range natRules {
		p.InboundNatRules = append(p.InboundNatRules, &armnetwork.InboundNatRule{Name: to.Ptr(fmt.Sprintf("ssh-%d", i))})
	}
	for _, l := range wanted(on).Listeners {
		svc, _, _ := listenerParts(l.Name)
		if fe := frontendName(svc); len(p.FrontendIPConfigurations) == 0 || *p.FrontendIPConfigurations[len(p.FrontendIPConfigurations)-1].Name != fe {
			p.FrontendIPConfigurations = append(p.FrontendIPConfigurations, &armnetwork.FrontendIPConfiguration{Name: to.Ptr(fe)})
		}
		rule, _ := ruleName(l.Name)
		p.LoadBalancingRules = append(p.LoadBalancingRules, &armnetwork.LoadBalancingRule{Name: to.Ptr(rule)})
	}
	return &armnetwork.LoadBalancer{Name: to.Ptr("lb-a"), Properties: p}
}

// wanted is the desired load balancer of Services with ports 80, 81, ….
func wanted(svcs ports) *model.LoadBalancer {
	lb := &model.LoadBalancer{Key: "lb-a"}
	names := make([]string, 0, len(svcs))
	for svc := range svcs {
		names = append(names, svc)
	}
	sort.Strings(names)
	for _, svc := range names {
		ns, name, _ := strings.Cut(svc, "/")
		for i := range svcs[svc] {
			port := int32(80 + i)
			lb.Listeners = append(lb.Listeners, model.Listener{Name: model.ListenerName(ns, name, "TCP", port), Port: port, Protocol: model.TCP})
		}
	}
	return lb
}

// TestOverCapacity: which Services overCapacity refuses at the limits. The
// ones already on the load balancer keep their room, then the new ones
// take what is left in name order; children zerodrop does not own count;
// a Service refused for another reason keeps its observed room; one that
// grows past the limit is refused (and keeps what it has), one that shrinks
// or leaves frees room.
func TestOverCapacity(t *testing.T) {
	small := capacity{frontends: 3, rules: 5}
	for _, tc := range []struct {
		name    string
		raw     *armnetwork.LoadBalancer
		desired ports
		bad     []string
		c       capacity
		refused []string
	}{
		{name: "all fit", desired: ports{"ns/a": 2, "ns/b": 3}, c: small},
		{name: "new ones in name order", desired: ports{"ns/c": 2, "ns/a": 2, "ns/b": 2}, c: small, refused: []string{"ns/c"}},
		{name: "a later one that fits still fits", desired: ports{"ns/a": 2, "ns/b": 4, "ns/c": 1}, c: small, refused: []string{"ns/b"}},
		{name: "on the load balancer first", raw: stored(ports{"ns/z": 2}, 0, 0, 0), desired: ports{"ns/a": 2, "ns/b": 2, "ns/z": 2}, c: small, refused: []string{"ns/b"}},
		{name: "a restart refuses the same", raw: stored(ports{"ns/z": 2, "ns/a": 2}, 0, 0, 0), desired: ports{"ns/a": 2, "ns/b": 2, "ns/z": 2}, c: small, refused: []string{"ns/b"}},
		{name: "growth on it before new ones", raw: stored(ports{"ns/z": 1}, 0, 0, 0), desired: ports{"ns/a": 3, "ns/z": 3}, c: small, refused: []string{"ns/a"}},
		{name: "growing past the limit", raw: stored(ports{"ns/a": 2, "ns/b": 2}, 0, 0, 0), desired: ports{"ns/a": 4, "ns/b": 3}, c: small, refused: []string{"ns/a"}},
		{name: "shrinking frees room", raw: stored(ports{"ns/a": 4}, 0, 0, 0), desired: ports{"ns/a": 1, "ns/b": 4}, c: small},
		{name: "leaving frees room", raw: stored(ports{"ns/a": 4}, 0, 0, 0), desired: ports{"ns/b": 5}, c: small},
		{name: "frontends", desired: ports{"ns/a": 1, "ns/b": 1, "ns/c": 1, "ns/d": 1}, c: small, refused: []string{"ns/d"}},
		{name: "foreign frontends count", raw: stored(nil, 2, 0, 0), desired: ports{"ns/a": 1, "ns/b": 1}, c: small, refused: []string{"ns/b"}},
		{name: "foreign and NAT rules count", raw: stored(nil, 0, 2, 1), desired: ports{"ns/a": 2, "ns/b": 1}, c: small, refused: []string{"ns/b"}},
		{name: "refused for another reason keeps its room", raw: stored(ports{"ns/z": 3}, 0, 0, 0), desired: ports{"ns/z": 3, "ns/a": 3}, bad: []string{"ns/z"}, c: small, refused: []string{"ns/a"}},
		{name: "refused for another reason takes only its room", raw: stored(ports{"ns/z": 1}, 0, 0, 0), desired: ports{"ns/z": 3, "ns/a": 4}, bad: []string{"ns/z"}, c: small},
		{name: "over already: only growth is refused", raw: stored(ports{"ns/a": 3, "ns/b": 3}, 0, 0, 0), desired: ports{"ns/a": 2, "ns/b": 3, "ns/c": 1}, c: small, refused: []string{"ns/c"}},
		{name: "Azure's limits", desired: ports{"ns/a": 1000, "ns/b": 500, "ns/c": 1}, c: capacity{DefaultMaxFrontends, DefaultMaxRules}, refused: []string{"ns/c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := map[string]error{}
			for _, svc := range tc.bad {
				bad[svc] = errors.New("bad annotation")
			}
			got := overCapacity("lb-a", tc.raw, wanted(tc.desired), bad, tc.c)
			var names []string
			for svc, err := range got {
				names = append(names, svc)
				var ue *UnrepresentableError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), svc) {
					t.Errorf("%s: %v, want an UnrepresentableError naming it", svc, err)
				}
			}
			sort.Strings(names)
			if fmt.Sprint(names) != fmt.Sprint(tc.refused) {
				t.Fatalf("refused %v, want %v", names, tc.refused)
			}
		})
	}
}
