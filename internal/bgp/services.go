package bgp

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"zerodrop.dev/zerodrop/internal/model"
)

// ServiceCandidates lists the node's candidates from the Services the data
// plane serves: every LoadBalancer Service of Class (and, with
// AdoptClassless, those without a class), not gate-only, with each IPv4
// ingress address it has in its status and the Service's TCP ports there.
// It reads an informer's cache: while the API server cannot be reached the
// last list stands, so an outage withdraws nothing — whether an address is
// announced is still the local check's to say (Announcer), never the API's.
type ServiceCandidates struct {
	Class          string
	AdoptClassless bool

	lister corelisters.ServiceLister
	synced cache.InformerSynced
}

// NewServiceCandidates watches every namespace's Services through client.
// Run starts the watch; Candidates answers from what it has seen.
func NewServiceCandidates(client kubernetes.Interface, class string, adoptClassless bool) (*ServiceCandidates, informers.SharedInformerFactory) {
	f := informers.NewSharedInformerFactory(client, 10*time.Minute)
	inf := f.Core().V1().Services()
	return &ServiceCandidates{Class: class, AdoptClassless: adoptClassless, lister: inf.Lister(), synced: inf.Informer().HasSynced}, f
}

// Synced reports whether the first list of the Services has arrived.
func (s *ServiceCandidates) Synced() bool { return s.synced() }

// Candidates implements CandidateSource. Before the first list has
// arrived it fails (the Announcer then keeps its last candidates: none at a
// start, so nothing is announced before the Services are known).
func (s *ServiceCandidates) Candidates(context.Context) ([]Candidate, error) {
	if !s.synced() {
		return nil, fmt.Errorf("the Services are not listed yet")
	}
	svcs, err := s.lister.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	return CandidatesFromServices(svcs, s.Class, s.AdoptClassless), nil
}

// CandidatesFromServices is the pure part of ServiceCandidates: the
// addresses of the Services of class (or classless, with adoptClassless)
// and their TCP ports, one Candidate per address (Services sharing an
// address merge their ports), sorted by address, each's ports sorted.
func CandidatesFromServices(svcs []*corev1.Service, class string, adoptClassless bool) []Candidate {
	ports := map[netip.Addr][]uint16{}
	for _, svc := range svcs {
		if !servedClass(svc, class, adoptClassless) || svc.DeletionTimestamp != nil {
			continue
		}
		var ps []uint16
		for _, p := range svc.Spec.Ports {
			if (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) && p.Port > 0 && p.Port <= 65535 {
				ps = append(ps, uint16(p.Port))
			}
		}
		if len(ps) == 0 {
			continue
		}
		for _, in := range svc.Status.LoadBalancer.Ingress {
			a, err := netip.ParseAddr(in.IP)
			if err != nil || !a.Is4() {
				continue
			}
			ports[a] = append(ports[a], ps...)
		}
	}
	out := make([]Candidate, 0, len(ports))
	for a, ps := range ports {
		slices.Sort(ps)
		out = append(out, Candidate{Address: a, Ports: slices.Compact(ps)})
	}
	slices.SortFunc(out, func(x, y Candidate) int { return x.Address.Compare(y.Address) })
	return out
}

// servedClass: a LoadBalancer Service the controller of class manages (its
// managed rule), not gate-only (another controller's load balancer).
func servedClass(svc *corev1.Service, class string, adoptClassless bool) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || model.GateOnly(svc.Annotations) {
		return false
	}
	if svc.Spec.LoadBalancerClass == nil {
		return adoptClassless
	}
	return *svc.Spec.LoadBalancerClass == class
}
