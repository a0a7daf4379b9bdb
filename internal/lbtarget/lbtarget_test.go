package lbtarget

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/memory"
	"zerodrop.dev/zerodrop/internal/testutil"
)

const (
	ns    = "default"
	class = "zerodrop.dev/memory"
)

// classServices stands in for the Service controller: Services of the memory
// class are zerodrop's, each with its own load balancer.
type classServices struct{}

func (classServices) Managed(s *corev1.Service) bool {
	return s.Spec.LoadBalancerClass != nil && *s.Spec.LoadBalancerClass == class
}
func (classServices) Key(s *corev1.Service) string { return s.Namespace + "/" + s.Name }

// service is a LoadBalancer Service named name selecting app=app.
func service(name, app string, mutate ...func(*corev1.Service)) *corev1.Service {
	s := testutil.LBService(ns, name, class, 80, 8080)
	s.Spec.Selector = map[string]string{"app": app}
	for _, m := range mutate {
		m(s)
	}
	return s
}

func nodeMode(local bool) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Annotations = map[string]string{model.AnnotationBackendMode: string(model.NodeMode)}
		s.Spec.Ports[0].NodePort = 30080
		if local {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
	}
}

// pod is a pod of app=web on node-1 at ips (the first is status.podIP).
func pod(ips ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-a", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ips[0]},
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

func node() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.9.0.1"}}}}
}

// lb is one load balancer with a port-80 listener for the Service svc.
type lb struct {
	svc      string
	backends []model.Backend
}

func be(addr string, port int32, state model.BackendState) model.Backend {
	return model.Backend{Address: addr, Port: port, Weight: 1, State: state}
}

func setLBs(prov *memory.Provider, lbs []lb) {
	for _, l := range lbs {
		prov.Set(&model.LoadBalancer{Key: ns + "/" + l.svc, Listeners: []model.Listener{{
			Name: listener(l.svc), Port: 80, Protocol: model.TCP, Backends: l.backends}}})
	}
}

func listener(svc string) string { return model.ListenerName(ns, svc, corev1.ProtocolTCP, 80) }

// brief prints a target field by field, so that a case states what it
// expects without going through Describe.
func brief(t Target) string {
	return fmt.Sprintf("%s reg=%v healthy=%v node=%v nodeOnly=%v state=%s conns=%d",
		t.Listener, t.Registered, t.Healthy, t.Node, t.NodeOnly, t.State, t.Connections)
}

// TestTargets: which load balancers select a pod and what they report of it.
// Reads go through a fake client: this is the lookup logic only (the
// apiserver tests are in the podgate and e2e packages).
func TestTargets(t *testing.T) {
	l := listener
	cases := []struct {
		name string
		svcs []*corev1.Service
		pod  *corev1.Pod
		lbs  []lb
		// unhealthy backends as "listener|address:port"; conns likewise.
		unhealthy []string
		conns     map[string]int64
		want      []string
	}{{
		name: "no Service selects the pod",
		svcs: []*corev1.Service{service("other", "other")},
		pod:  pod("10.1.0.1"),
	}, {
		name: "Services that are not zerodrop's or are going away are ignored",
		svcs: []*corev1.Service{
			service("foreign", "web", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To("example.com/other") }),
			service("leaving", "web", func(s *corev1.Service) {
				s.DeletionTimestamp = ptr.To(metav1.Now())
				s.Finalizers = []string{"example.com/hold"}
			}),
			service("noselector", "web", func(s *corev1.Service) { s.Spec.Selector = nil }),
		},
		pod: pod("10.1.0.1"),
	}, {
		name: "not registered",
		svcs: []*corev1.Service{service("web", "web")},
		pod:  pod("10.1.0.1"),
		lbs:  []lb{{"web", []model.Backend{be("10.1.0.2", 8080, model.Active)}}},
		want: []string{l("web") + " reg=false healthy=false node=false nodeOnly=false state= conns=-1"},
	}, {
		name: "registered and healthy",
		svcs: []*corev1.Service{service("web", "web")},
		pod:  pod("10.1.0.1"),
		lbs:  []lb{{"web", []model.Backend{be("10.1.0.1", 8080, model.Active)}}},
		want: []string{l("web") + " reg=true healthy=true node=false nodeOnly=false state=active conns=0"},
	}, {
		name:      "registered, checks failing",
		svcs:      []*corev1.Service{service("web", "web")},
		pod:       pod("10.1.0.1"),
		lbs:       []lb{{"web", []model.Backend{be("10.1.0.1", 8080, model.Active)}}},
		unhealthy: []string{l("web") + "|10.1.0.1:8080"},
		want:      []string{l("web") + " reg=true healthy=false node=false nodeOnly=false state=active conns=0"},
	}, {
		name:  "draining with connections",
		svcs:  []*corev1.Service{service("web", "web")},
		pod:   pod("10.1.0.1"),
		lbs:   []lb{{"web", []model.Backend{be("10.1.0.1", 8080, model.Draining)}}},
		conns: map[string]int64{l("web") + "|10.1.0.1:8080": 3},
		want:  []string{l("web") + " reg=true healthy=true node=false nodeOnly=false state=draining conns=3"},
	}, {
		name: "two load balancers, registered in one only",
		svcs: []*corev1.Service{service("web", "web"), service("web2", "web")},
		pod:  pod("10.1.0.1"),
		lbs:  []lb{{"web", []model.Backend{be("10.1.0.1", 8080, model.Active)}}, {"web2", nil}},
		want: []string{
			l("web") + " reg=true healthy=true node=false nodeOnly=false state=active conns=0",
			l("web2") + " reg=false healthy=false node=false nodeOnly=false state= conns=-1",
		},
	}, {
		name: "UDP port of a provider without UDP is not a target",
		svcs: []*corev1.Service{service("dns", "web", func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "udp", Port: 53, Protocol: corev1.ProtocolUDP})
		})},
		pod:  pod("10.1.0.1"),
		lbs:  []lb{{"dns", []model.Backend{be("10.1.0.1", 8080, model.Active)}}},
		want: []string{l("dns") + " reg=true healthy=true node=false nodeOnly=false state=active conns=0"},
	}, {
		name:      "node mode, Cluster: the node's health counts",
		svcs:      []*corev1.Service{service("web", "web", nodeMode(false))},
		pod:       pod("10.1.0.1"),
		lbs:       []lb{{"web", []model.Backend{be("10.9.0.1", 30080, model.Active)}}},
		unhealthy: []string{l("web") + "|10.9.0.1:30080"},
		want:      []string{l("web") + " reg=true healthy=false node=true nodeOnly=false state=active conns=0"},
	}, {
		name:      "node mode, Local: the node is the backend, its health follows the pod",
		svcs:      []*corev1.Service{service("web", "web", nodeMode(true))},
		pod:       pod("10.1.0.1"),
		lbs:       []lb{{"web", []model.Backend{be("10.9.0.1", 30080, model.Active)}}},
		unhealthy: []string{l("web") + "|10.9.0.1:30080"},
		want:      []string{l("web") + " reg=true healthy=false node=true nodeOnly=true state=active conns=0"},
	}, {
		name: "node mode, Local: node not registered",
		svcs: []*corev1.Service{service("web", "web", nodeMode(true))},
		pod:  pod("10.1.0.1"),
		lbs:  []lb{{"web", []model.Backend{be("10.9.0.2", 30080, model.Active)}}},
		want: []string{l("web") + " reg=false healthy=false node=true nodeOnly=true state= conns=-1"},
	}, {
		name: "node mode, Local, another annotation invalid: still judged by its node",
		svcs: []*corev1.Service{service("web", "web", nodeMode(true), func(s *corev1.Service) {
			s.Annotations[model.AnnotationHealthCheckInterval] = "bogus"
		})},
		pod:       pod("10.1.0.1"),
		lbs:       []lb{{"web", []model.Backend{be("10.9.0.1", 30080, model.Active)}}},
		unhealthy: []string{l("web") + "|10.9.0.1:30080"},
		want:      []string{l("web") + " reg=true healthy=false node=true nodeOnly=true state=active conns=0"},
	}, {
		name: "dual-stack: registered under the second address",
		svcs: []*corev1.Service{service("web", "web")},
		pod:  pod("10.1.0.1", "fd00:10:1::1"),
		lbs:  []lb{{"web", []model.Backend{be("fd00:10:1::1", 8080, model.Active)}}},
		want: []string{l("web") + " reg=true healthy=true node=false nodeOnly=false state=active conns=0"},
	}, {
		name: "dual-stack: the provider spells the address differently",
		svcs: []*corev1.Service{service("web", "web")},
		pod:  pod("10.1.0.1", "fd00:10:1::1"),
		lbs:  []lb{{"web", []model.Backend{be("fd00:10:1:0:0:0:0:1", 8080, model.Active)}}},
		want: []string{l("web") + " reg=true healthy=true node=false nodeOnly=false state=active conns=0"},
	}, {
		// One address still active takes new connections: the target is
		// active until every address drains (the termination gate waits).
		name: "dual-stack: registered under both, one not healthy yet, one draining",
		svcs: []*corev1.Service{service("web", "web")},
		pod:  pod("10.1.0.1", "fd00:10:1::1"),
		lbs: []lb{{"web", []model.Backend{be("10.1.0.1", 8080, model.Active),
			be("fd00:10:1::1", 8080, model.Draining)}}},
		unhealthy: []string{l("web") + "|10.1.0.1:8080"},
		conns:     map[string]int64{l("web") + "|10.1.0.1:8080": 1, l("web") + "|fd00:10:1::1:8080": 2},
		want:      []string{l("web") + " reg=true healthy=false node=false nodeOnly=false state=active conns=3"},
	}, {
		name: "dual-stack: both addresses draining",
		svcs: []*corev1.Service{service("web", "web")},
		pod:  pod("10.1.0.1", "fd00:10:1::1"),
		lbs: []lb{{"web", []model.Backend{be("10.1.0.1", 8080, model.Draining),
			be("fd00:10:1::1", 8080, model.Draining)}}},
		conns: map[string]int64{l("web") + "|10.1.0.1:8080": 1, l("web") + "|fd00:10:1::1:8080": 2},
		want:  []string{l("web") + " reg=true healthy=true node=false nodeOnly=false state=draining conns=3"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := []client.Object{node(), tc.pod}
			for _, s := range tc.svcs {
				objs = append(objs, s)
			}
			reader := fake.NewClientBuilder().WithObjects(objs...).Build()
			prov := memory.New(provider.Hooks{})
			setLBs(prov, tc.lbs)
			for _, u := range tc.unhealthy {
				lis, id, _ := strings.Cut(u, "|")
				prov.SetHealthy(lis, id, false)
			}
			for k, n := range tc.conns {
				lis, id, _ := strings.Cut(k, "|")
				prov.SetConnections(lis, id, n)
			}
			f := &Finder{Reader: reader, Services: classServices{}, Provider: prov}
			targets, err := f.Targets(context.Background(), tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tg := range targets {
				got = append(got, brief(tg))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("targets:\n got  %q\n want %q", got, tc.want)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	ts := []Target{
		{Listener: "a", Registered: true, Healthy: true, State: model.Active},
		{Listener: "b", Registered: true, State: model.Active},
		{Listener: "c", Connections: -1},
		{Listener: "d", Registered: true, Healthy: true, State: model.Draining, Connections: 4},
	}
	want := "a: serving; b: registered, not healthy yet; c: not registered; d: draining (4 connections)"
	if got := Describe(ts); got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
}
