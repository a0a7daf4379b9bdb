package azure

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/model"
)

// AnnotationLoadBalancer places a Service on one of the configured load
// balancers. (Not under zerodrop.dev/: the model refuses unknown annotations
// there; azure.zerodrop.dev/ is zerodrop's, for this provider.)
const AnnotationLoadBalancer = "azure." + model.AnnotationPrefix + "load-balancer"

// KeyFunc maps a Service to the load balancer it lives on, for the
// controller's Options.KeyFunc; every Service mapped to one name shares one
// work item. In order:
//
//  1. the annotation, when it names a configured load balancer;
//  2. the load balancer that already has the Service's frontend, so that
//     neither a new entry in Options.LoadBalancers nor a removed or invalid
//     annotation moves a Service (a move deletes and recreates its frontend,
//     and its address changes);
//  3. rendezvous hashing of namespace/name over the configured names: stable,
//     and a new load balancer takes only its share of new Services.
//
// Moving a Service is asking for it: set the annotation.
func (p *Provider) KeyFunc(svc *corev1.Service) string {
	if name := svc.Annotations[AnnotationLoadBalancer]; p.configured[name] {
		return name
	}
	id := svc.Namespace + "/" + svc.Name
	best := rendezvous(id, p.opts.LoadBalancers)
	p.mu.Lock()
	defer p.mu.Unlock()
	if on := p.placed[id]; len(on) > 0 && !on[best] {
		names := make([]string, 0, len(on))
		for n := range on {
			if p.configured[n] {
				names = append(names, n)
			}
		}
		if len(names) > 0 {
			sort.Strings(names)
			return names[0]
		}
	}
	return best
}

// ValidateService reports a Service annotation this provider cannot follow.
// The Service then stays where it is (KeyFunc) and keeps its listeners.
func (p *Provider) ValidateService(svc *corev1.Service) error {
	if name, ok := svc.Annotations[AnnotationLoadBalancer]; ok && !p.configured[name] {
		return &model.InvalidConfigError{Problems: []string{
			fmt.Sprintf("%s=%q: not a configured load balancer (%v)", AnnotationLoadBalancer, name, p.opts.LoadBalancers)}}
	}
	return nil
}

// rendezvous picks the name with the highest hash of (name, id).
func rendezvous(id string, names []string) string {
	best, bestScore := "", uint64(0)
	for _, n := range names {
		sum := sha256.Sum256([]byte(n + "\x00" + id))
		if s := binary.BigEndian.Uint64(sum[:8]); best == "" || s > bestScore || s == bestScore && n < best {
			best, bestScore = n, s
		}
	}
	return best
}

// Annotations are the Azure provider's (docs/annotations.md is generated
// from them).
var Annotations = []model.AnnotationDoc{
	{Key: AnnotationLoadBalancer, On: "Service", Default: "rendezvous hashing over --azure-load-balancers",
		Doc: "Which of the configured load balancers the Service's frontend lives on; setting it moves the Service (its frontend is deleted and recreated, its address changes)."},
}
