package service

import (
	"context"

	"zerodrop.dev/zerodrop/internal/model"
)

// settleModes settles the backend mode of st's Services that no annotation
// gives one (model.ServiceConfig.Settle) on the load balancer as observed:
// a Service it already serves in IP mode stays there when the provider's
// default is node mode (Azure), so an upgrade from a version whose default
// was IP mode rewrites no pool under live connections. The gates settle it
// on the same load balancer the same way (lbtarget). Nothing to do where
// the default is IP mode (HAProxy): no node list is read then.
func (c *Controller) settleModes(ctx context.Context, st *state, observed *model.LoadBalancer) error {
	need := false
	for _, ins := range [][]model.ServiceInput{st.active, st.held} {
		for _, in := range ins {
			need = need || in.Config.ModeDefault && in.Config.Mode != model.IPMode
		}
	}
	if !need || observed == nil {
		return nil
	}
	nodes, err := c.listNodes(ctx)
	if err != nil {
		return err
	}
	addrs := model.NodeAddresses(nodes, c.opts.BackendAddressMap)
	served := &model.Served{Backends: model.ObservedBackends(observed), Node: func(a string) bool { return addrs[a] }}
	for _, ins := range [][]model.ServiceInput{st.active, st.held} {
		for i := range ins {
			before := ins[i].Config.Mode
			ins[i].Config = ins[i].Config.Settle(ins[i].Service, served)
			if ins[i].Config.Mode != before {
				logFrom(ctx).V(1).Info("Service kept in IP mode, not the provider's default", "service",
					ins[i].Service.Namespace+"/"+ins[i].Service.Name, "reason", ins[i].Config.ModeKept)
			}
		}
	}
	return nil
}
