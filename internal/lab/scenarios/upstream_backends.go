package scenarios

import (
	"context"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/lab/upstream"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// backends reads the run's backends for the reports and the steady-state
// checks: from prov, zerodrop's view of its HAProxy, or in the upstream and
// recipe modes from the upstream cloud's own configuration, which shares
// no names with zerodrop's (upstreamBackends).
func (r *run) backends(ctx context.Context, prov *haproxy.Provider) ([]provider.BackendStatus, error) {
	if r.world != nil {
		return r.world.Backends(r.addr)
	}
	if r.mode.NodeBacked() {
		return r.upstreamBackends(ctx)
	}
	return prov.Backends(ctx, r.key())
}

// upstreamBackends reads the upstream cloud's rules of the run's Service
// from `show stat` at the admin socket (through the counting proxy: a read)
// and puts them in the form the lab's readers take: each rule as the
// Service port's listener, each node active (the cloud never drains), and
// healthy when its probe holds it in rotation.
func (r *run) upstreamBackends(ctx context.Context) ([]provider.BackendStatus, error) {
	bs, err := upstream.ReadBackends(ctx, filepath.Join(r.dir, "admin.sock"), r.upstreamLB)
	if err != nil {
		return nil, err
	}
	out := make([]provider.BackendStatus, 0, len(bs))
	for _, b := range bs {
		state := model.Active
		if b.Status == "MAINT" {
			state = haproxy.StateMaint
		}
		out = append(out, provider.BackendStatus{
			Listener:    model.ListenerName(r.ns, appName, corev1.ProtocolTCP, b.Port),
			Address:     b.Address,
			Port:        b.BackendPort,
			State:       state,
			Healthy:     b.Up(),
			HealthKnown: true,
			Connections: b.Sessions,
		})
	}
	return out, nil
}
