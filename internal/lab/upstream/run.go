package upstream

import (
	"context"
	"fmt"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	cloudprovider "k8s.io/cloud-provider"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
)

// ClusterName is the cluster name the service controller passes the cloud,
// as kube-controller-manager's --cluster-name defaults it.
const ClusterName = "kubernetes"

// Run runs the upstream service controller against cfg's API server with
// cloud until ctx ends, with kube-controller-manager's default of one
// worker (--concurrent-service-syncs). The informers resync as
// kube-controller-manager's do not matter here: the service controller
// re-syncs Services on node changes and on its own retry schedule.
func Run(ctx context.Context, cfg *rest.Config, cloud cloudprovider.Interface) error {
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return fmt.Errorf("upstream service controller: client: %w", err)
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	ctrl, err := servicecontroller.New(cloud, cs, factory.Core().V1().Services(), factory.Core().V1().Nodes(),
		ClusterName, utilfeature.DefaultFeatureGate)
	if err != nil {
		return fmt.Errorf("upstream service controller: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	ctrl.Run(ctx, 1, controllersmetrics.NewControllerManagerMetrics("zerodrop-lab-upstream"))
	return nil
}
