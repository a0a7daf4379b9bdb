package lbtarget

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// settler gives each Service the backend mode the controller writes it in:
// its annotation's, or the provider's default settled on what its load
// balancer holds (model.ServiceConfig.Settle, as the controller settles
// it), so that a Service an earlier version serves in IP mode is gated in
// IP mode where the provider's default is node mode. The nodes are listed
// once per call, and only for such a Service.
type settler struct {
	f     *Finder
	nodes map[string]bool
}

// mode is svc's backend mode, statuses what its load balancer reported
// (the first view's: with data-plane replicas the default is IP mode and
// nothing is settled).
func (s *settler) mode(ctx context.Context, svc *corev1.Service, statuses []provider.BackendStatus) (model.BackendMode, error) {
	cfg, _ := model.ParseServiceConfig(svc.Annotations, provider.DefaultBackendMode(s.f.Provider))
	cfg = cfg.Settle(svc, nil)
	if !cfg.ModeDefault || cfg.Mode == model.IPMode {
		return cfg.Mode, nil
	}
	if s.nodes == nil {
		var list corev1.NodeList
		if err := s.f.Reader.List(ctx, &list); err != nil {
			return "", fmt.Errorf("list nodes: %w", err)
		}
		nodes := make([]*corev1.Node, len(list.Items))
		for i := range list.Items {
			nodes[i] = &list.Items[i]
		}
		s.nodes = model.NodeAddresses(nodes, s.f.AddressMap)
	}
	backends := func(listener string) []model.Backend {
		var out []model.Backend
		for _, st := range statuses {
			if st.Listener == listener {
				out = append(out, model.Backend{Address: st.Address, Port: st.Port, State: st.State})
			}
		}
		return out
	}
	return cfg.Settle(svc, &model.Served{Backends: backends, Node: func(a string) bool { return s.nodes[a] }}).Mode, nil
}
