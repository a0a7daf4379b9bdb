package timing

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// AWS annotations that decide what a target group holds.
const (
	AWSLoadBalancerType = "service.beta.kubernetes.io/aws-load-balancer-type"
	AWSNLBTargetType    = "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"
)

// Path is the traffic model of one Service: what its load balancer sends
// traffic to, and therefore which timings exist. Every rule consults it.
type Path struct {
	// PodTargets is true when the load balancer registers pod IPs (AWS IP
	// targets, zerodrop's HAProxy); false when it balances across nodes and
	// kube-proxy forwards to the pods.
	PodTargets bool
	// Local is externalTrafficPolicy Local: a node takes traffic only while
	// the load balancer's health check sees a ready endpoint on it.
	Local bool
	// Desc names the path for messages and --explain.
	Desc string
}

// Registers reports whether a new pod waits for the load balancer before it
// gets traffic: the load balancer registers the pod itself, or (Local) the
// node only once its health check sees the pod. On a node-backed load
// balancer with Cluster, the nodes stay registered and a new pod gets
// traffic as soon as kube-proxy programs it.
func (p Path) Registers() bool { return p.PodTargets || p.Local }

// PathOf returns the path of svc's load balancer under provider p.
// Azure's and GKE's L4 load balancers and the generic (kube-proxy, MetalLB
// and most on-premises) case balance across nodes; on AWS the target group
// holds pod IPs only with target type ip (or the legacy nlb-ip type), the
// in-tree controller and target type instance register nodes; zerodrop's
// HAProxy provider registers the pods of the Service's EndpointSlices.
func PathOf(p Provider, svc *corev1.Service) Path {
	var path Path
	if svc != nil {
		path.Local = svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	}
	lb := "node-backed"
	switch p {
	case HAProxy:
		path.PodTargets, lb = true, "HAProxy registers pod IPs"
	case AWS:
		lb = "AWS instance targets, node-backed"
		if svc != nil && (strings.EqualFold(svc.Annotations[AWSNLBTargetType], "ip") ||
			strings.EqualFold(svc.Annotations[AWSLoadBalancerType], "nlb-ip")) {
			path.PodTargets, lb = true, "AWS IP targets: the target group registers pod IPs"
		}
	}
	switch {
	case path.PodTargets:
		path.Desc = lb
	case path.Local:
		path.Desc = lb + ", Local: a node takes traffic only while the load balancer's health check sees a ready pod on it"
	default:
		path.Desc = lb + ", Cluster: the load balancer probes nodes and kube-proxy forwards to any ready pod"
	}
	return path
}
