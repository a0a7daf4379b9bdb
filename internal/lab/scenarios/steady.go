package scenarios

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// steadyQuiet is how long the requests sent must all have succeeded for a
// run under traffic to be steady. A failure is recorded when the request
// ends, up to ioTimeout after it was sent, so the check looks at failures of
// the last steadyQuiet+ioTimeout: every request sent in [now-5s, now-2s] has
// ended by now, and none of them failed.
const steadyQuiet = 3 * time.Second

// waitSteady waits until the Deployment has want ready, updated replicas and
// no others, no pod of the namespace is terminating, HAProxy has exactly
// those backends, active, and requests through the load balancer succeed.
func (r *run) waitSteady(ctx context.Context, want int32, timeout time.Duration) error {
	return traffic.WaitFor(ctx, timeout, "steady state", func() (bool, string) {
		if err := r.lab.cp.KCMAlive(); err != nil {
			return false, err.Error()
		}
		d, err := r.lab.cp.Client.AppsV1().Deployments(r.ns).Get(ctx, appName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := d.Status
		if d.Status.ObservedGeneration < d.Generation || st.Replicas != want || st.UpdatedReplicas != want ||
			st.ReadyReplicas != want || st.AvailableReplicas != want {
			return false, fmt.Sprintf("deployment replicas=%d updated=%d ready=%d available=%d, want %d",
				st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas, want)
		}
		if running, terminating := r.lab.agent.Counts(r.ns); running != int(want) || terminating != 0 {
			return false, fmt.Sprintf("pods running=%d terminating=%d", running, terminating)
		}
		// The preStop hooks need the drain Service: every node's kube-proxy
		// must forward its ClusterIP to a ready replica of this run (until
		// then kube-proxy refuses, and a hook that fails lets the pod stop
		// at once).
		if r.mode.Gated() {
			if err := r.drainReachable(ctx); err != nil {
				return false, err.Error()
			}
		}
		if r.addr == "" {
			svc, err := r.lab.cp.Client.CoreV1().Services(r.ns).Get(ctx, appName, metav1.GetOptions{})
			if err != nil || len(svc.Status.LoadBalancer.Ingress) == 0 {
				return false, "no ingress address yet"
			}
			ip, err := r.ingressIP(ctx, svc.Status.LoadBalancer.Ingress[0])
			if err != nil {
				return false, err.Error()
			}
			r.addr = net.JoinHostPort(ip, strconv.Itoa(servicePort))
		}
		for _, v := range r.views() {
			if ok, why := r.backendsSteady(ctx, v, want); !ok {
				if v.Name != "" {
					why = "data-plane replica " + v.Name + ": " + why
				}
				return false, why
			}
		}
		// Under traffic, steady also means the clients have seen no
		// failure for a while: in node mode HAProxy's backends are the
		// nodes, which a rollout does not change.
		if r.rec != nil && !r.rec.QuietFor(steadyQuiet+traffic.IOTimeout) {
			return false, fmt.Sprintf("a request sent in the last %s failed or may still fail", steadyQuiet+traffic.IOTimeout)
		}
		if r.rec == nil {
			client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true,
				DialContext: r.lab.net.Client.DialContext}}
			for i := 0; i < 2*int(want); i++ {
				if err := traffic.Get(client, "http://"+r.addr+"/"); err != nil {
					return false, "request through the load balancer: " + err.Error()
				}
			}
		}
		return true, ""
	})
}

// views are the run's load balancers the workload must be steady on:
// every data-plane replica's the traffic reaches (world.DataPlane), or the
// world's one.
func (r *run) views() []world.View {
	if dp := r.dataPlane(); dp != nil {
		return dp.Views()
	}
	return []world.View{{Backends: func(ctx context.Context) ([]provider.BackendStatus, error) {
		return r.world.Backends(ctx, r.addr)
	}}}
}

// backendsSteady: prov has exactly the backends the workload of want
// replicas should have, and why not. IP mode: one backend per pod, all
// active and up. Node mode: a backend per node; Cluster: all active and up;
// Local: up exactly on the nodes with a pod. zerodrop keeps a node without a
// local endpoint registered, drained; the upstream controller keeps it
// active, and its probe (the health-check node port) holds it down.
func (r *run) backendsSteady(ctx context.Context, v world.View, want int32) (bool, string) {
	bs, err := v.Backends(ctx)
	if err != nil {
		return false, err.Error()
	}
	local := r.backend == BackendNode && r.policy == PolicyLocal
	// zerodrop drains a node without a ready local endpoint, unless its
	// provider leaves that to the probe (Azure): then every node stays
	// active and only the serving ones are up, as with the CCM's pools.
	drains := local && r.mode == report.ModeZerodrop
	if d, ok := r.world.(world.ProbeDecider); ok && d.ProbeDecidesLocal() {
		drains = false
	}
	active, up := 0, 0
	for _, b := range bs {
		if r.backend == BackendNode && r.taintedAddrs[b.Address] {
			// A node the run tainted for deletion (maintenance): one
			// writer takes it out, another keeps it (NIC-based pools
			// on Azure), and either is steady; with Cluster its
			// kube-proxy's health check fails from the taint on.
			continue
		}
		if b.State != model.Active && !drains {
			return false, fmt.Sprintf("backend %s:%d is %s", b.Address, b.Port, b.State)
		}
		if b.State == model.Active {
			active++
			if b.Healthy || !b.HealthKnown {
				up++
			}
		}
	}
	wantUp := int(want)
	switch {
	case local:
		if wantUp, err = r.servingNodes(ctx); err != nil {
			return false, err.Error()
		}
	case r.backend == BackendNode:
		wantUp = active
	}
	if up != wantUp || up == 0 {
		return false, fmt.Sprintf("HAProxy has %d backends up, want %d", up, wantUp)
	}
	if (r.backend == BackendIP || drains) && active != wantUp {
		return false, fmt.Sprintf("HAProxy has %d active backends, want %d", active, wantUp)
	}
	return true, ""
}

// ingressIP is the address of a Service's ingress: its IP, or the address
// the world resolves its hostname to (world.Resolver).
func (r *run) ingressIP(ctx context.Context, ing corev1.LoadBalancerIngress) (string, error) {
	if ing.IP != "" || ing.Hostname == "" {
		return ing.IP, nil
	}
	res, ok := r.world.(world.Resolver)
	if !ok {
		return "", fmt.Errorf("the ingress is the hostname %s, which the lab cannot resolve", ing.Hostname)
	}
	return res.Resolve(ctx, ing.Hostname)
}
