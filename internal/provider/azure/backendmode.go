package azure

import (
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

var _ provider.BackendModeDefaulter = (*Provider)(nil)

// DefaultBackendMode implements provider.BackendModeDefaulter: node mode,
// as cloud-provider-azure's own pools (the nodes on the nodePort, a Local
// Service probed on kube-proxy's health-check node port). It works with
// every network plugin, where IP mode needs pod addresses inside the
// virtual network (Azure CNI without overlay), and a Local Service's pod
// moving node writes nothing (ProbeDecidesLocal). A Service an earlier
// version serves in IP mode keeps it (model.ServiceConfig.Settle): moving
// it would rewrite its pool under live connections.
func (p *Provider) DefaultBackendMode() model.BackendMode { return model.NodeMode }
