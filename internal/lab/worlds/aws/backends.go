package aws

import (
	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/lab/awsdp"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// backendsOf is a listener's targets as the lab's steady check reads a
// load balancer's backends: each instance target at its node's address
// and the traffic port; draining ones draining, the others active; up
// only when healthy (initial and unhealthy targets are not, even when the
// group fails open and sends them traffic).
func backendsOf(ts []awsdp.Target, listener string) []provider.BackendStatus {
	out := make([]provider.BackendStatus, 0, len(ts))
	for _, t := range ts {
		state := model.Active
		if t.State == awsapi.StateDraining {
			state = model.Draining
		}
		out = append(out, provider.BackendStatus{Listener: listener, Address: t.Addr.Addr().String(), Port: int32(t.Addr.Port()),
			State: state, Healthy: t.State == awsapi.StateHealthy, HealthKnown: true})
	}
	return out
}
