package azurearm

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// The rule-health operation ARM offers for a load-balancing rule
// (`POST …/loadBalancers/{lb}/loadBalancingRules/{rule}/health`): a
// long-running operation whose result, read from its Location
// (`…/locations/{location}/operationResults/{id}`: the SDK's poller follows
// Location for it, FinalStateVia Location in armnetwork's
// LoadBalancerLoadBalancingRulesClient.BeginHealth), counts the rule's
// backend addresses Up and Down and lists each with its state. ARM reads it
// from the load balancer's probes; the emulator has none of its own, so it
// asks a RuleHealth — a data plane that probes the backends — when the
// operation ends, and refuses the request when none is set rather than
// inventing an answer.
// Reference: https://learn.microsoft.com/rest/api/load-balancer/load-balancer-load-balancing-rules/health

// BackendHealth is one backend address's state in a rule-health answer:
// State "Up" or "Down", with a reason. IPConfigurationID, when the data
// plane knows it (a member of a NIC-based pool), is answered as the entry's
// networkInterfaceIPConfigurationId (LoadBalancerHealthPerRulePerBackendAddress
// in the REST reference below: "Resource ID of the Network Interface IP
// Configuration"); IPAddress may then be empty, and is left out.
type BackendHealth struct{ IPAddress, IPConfigurationID, State, Reason string }

// RuleHealth answers the rule-health operation for a rule of a load
// balancer in a resource group.
type RuleHealth func(resourceGroup, loadBalancer, rule string) ([]BackendHealth, error)

// SetRuleHealth sets what answers the rule-health operation; nil refuses it.
func (e *Emulator) SetRuleHealth(f RuleHealth) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ruleHealth = f
}

// healthQuery is what a rule-health operation asks.
type healthQuery struct{ rg, lb, rule string }

// startRuleHealth answers the POST that starts a rule-health operation:
// 202 with the Location of its result.
func (e *Emulator) startRuleHealth(req *http.Request, t target) *reply {
	if req.Method != http.MethodPost {
		return errorReply(http.StatusMethodNotAllowed, "MethodNotAllowed", "the rule-health operation is a POST")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	lb, ok := e.lbs[lbKey(t.rg, t.parent)]
	if !ok {
		return notFound(target{kind: kLB, rg: t.rg, name: t.parent})
	}
	found := false
	for _, r := range lb.Properties.LoadBalancingRules {
		found = found || strings.EqualFold(*r.Name, t.name)
	}
	if !found {
		return errorReply(http.StatusNotFound, "NotFound", "load balancer "+t.parent+" has no rule "+t.name)
	}
	if e.ruleHealth == nil {
		return errorReply(http.StatusBadRequest, "RuleHealthNotModelled",
			"emulator: the rule-health operation needs a data plane (SetRuleHealth)")
	}
	id := e.newOperation(t.faultKey(), clientOf(req), e.opts.PollSteps-1, &healthQuery{rg: t.rg, lb: t.parent, rule: t.name})
	rep := &reply{status: http.StatusAccepted, header: http.Header{}}
	rep.header.Set("Location", BaseURL(req)+"subscriptions/"+t.sub+"/providers/Microsoft.Network/locations/"+
		e.opts.Location+"/operationResults/"+id+"?api-version="+t.apiVersion)
	setRetryAfter(rep.header, e.opts.PollRetryAfter)
	return rep
}

// operationResult answers a GET of a rule-health operation's Location: 202
// while it runs, then its result, read from the RuleHealth as it ends — and
// the same result to a client that asks again.
func (e *Emulator) operationResult(t target) *reply {
	e.mu.Lock()
	op, ok := e.ops[t.operation]
	if !ok || op.health == nil {
		e.mu.Unlock()
		return errorReply(http.StatusNotFound, "OperationNotFound", "no operation "+t.operation)
	}
	if op.result != nil {
		e.mu.Unlock()
		return op.result
	}
	if op.poll(time.Now()) {
		rep := &reply{status: http.StatusAccepted, header: http.Header{}}
		setRetryAfter(rep.header, e.opts.PollRetryAfter)
		e.mu.Unlock()
		return rep
	}
	q, health := *op.health, e.ruleHealth
	e.mu.Unlock()
	rep := healthResult(q, health)
	e.mu.Lock()
	defer e.mu.Unlock()
	if op.result != nil {
		return op.result // a concurrent GET ended it first: one answer
	}
	return op.finish(time.Now(), rep)
}

// healthResult is the rule-health operation's result: the data plane's
// answer, or an error.
func healthResult(q healthQuery, health RuleHealth) *reply {
	if health == nil {
		return errorReply(http.StatusBadRequest, "RuleHealthNotModelled", "emulator: no data plane answers rule health")
	}
	backends, err := health(q.rg, q.lb, q.rule)
	if err != nil {
		return errorReply(http.StatusInternalServerError, "InternalServerError", "rule health: "+err.Error())
	}
	res := armnetwork.LoadBalancerHealthPerRule{Up: to.Ptr[int32](0), Down: to.Ptr[int32](0),
		LoadBalancerBackendAddresses: []*armnetwork.LoadBalancerHealthPerRulePerBackendAddress{}}
	for _, b := range backends {
		if b.State == "Up" {
			*res.Up++
		} else {
			*res.Down++
		}
		a := &armnetwork.LoadBalancerHealthPerRulePerBackendAddress{State: to.Ptr(b.State), Reason: to.Ptr(b.Reason)}
		if b.IPAddress != "" {
			a.IPAddress = to.Ptr(b.IPAddress)
		}
		if b.IPConfigurationID != "" {
			a.NetworkInterfaceIPConfigurationID = to.Ptr(b.IPConfigurationID)
		}
		res.LoadBalancerBackendAddresses = append(res.LoadBalancerBackendAddresses, a)
	}
	body, err := json.Marshal(res)
	if err != nil {
		return errorReply(http.StatusInternalServerError, "InternalServerError", err.Error())
	}
	return jsonReply(http.StatusOK, body)
}
