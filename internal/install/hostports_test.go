package install

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// surgeValues turn the data plane's DaemonSet update into a surge, as the
// issue on upgrades that carry connections will make the default.
var surgeValues = []string{
	"haproxy.updateStrategy.type=RollingUpdate",
	"haproxy.updateStrategy.rollingUpdate.maxSurge=1",
	"haproxy.updateStrategy.rollingUpdate.maxUnavailable=0",
}

// TestChartHostNetworkPodsThatSurgeDeclareNoPorts: a host-network pod's
// declared container port is a host port (the API server defaults hostPort
// to it), and the scheduler's NodePorts filter never puts a second pod with
// the same host port on a node. A workload that may surge — a DaemonSet with
// a non-zero maxSurge, or a rolling Deployment — starts its new pod on a node
// whose old pod still runs, so such a pod template declares no container
// port and no hostPort: otherwise the update stalls with the new pod Pending.
// Checked on the chart's renders, the data plane's own (default) strategy
// and a surge one. Without declared ports, the data plane's probes and its
// PodMonitor name the process's ports by number.
func TestChartHostNetworkPodsThatSurgeDeclareNoPorts(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		// surging is how many host-network workloads of the render may
		// surge: the check must have something to look at.
		surging int
	}{
		{name: "azure", set: allFeatures},
		{name: "haproxy", set: append(append([]string{}, haproxyValues...), allFeatures...)},
		{name: "haproxy with surge", set: append(append(append([]string{}, haproxyValues...), allFeatures...), surgeValues...), surging: 1},
		{name: "haproxy with surge in percent", set: append(append(append([]string{}, haproxyValues...), allFeatures...),
			"haproxy.updateStrategy.rollingUpdate.maxSurge=10%", "haproxy.updateStrategy.rollingUpdate.maxUnavailable=0"), surging: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.set...)
			surging := 0
			for _, o := range objs {
				spec, ok := hostNetworkPodThatMaySurge(t, o)
				if !ok {
					continue
				}
				surging++
				for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
					for _, p := range c.Ports {
						t.Errorf("%s %s: host-network pod that may surge: container %s declares port %s %d (hostPort %d); a surge pod on the same node would stay Pending",
							o.GetKind(), o.GetName(), c.Name, p.Name, p.ContainerPort, p.HostPort)
					}
				}
			}
			if surging != tc.surging {
				t.Errorf("%d host-network workloads may surge, want %d", surging, tc.surging)
			}
			if strings.HasPrefix(tc.name, "haproxy") {
				checkDataPlanePortsByNumber(t, objs)
			}
		})
	}
}

// hostNetworkPodThatMaySurge is o's pod template when o is a host-network
// workload whose update may run a new pod beside the old one on a node.
func hostNetworkPodThatMaySurge(t *testing.T, o *unstructured.Unstructured) (corev1.PodSpec, bool) {
	t.Helper()
	switch o.GetKind() {
	case "DaemonSet":
		ds := typed[appsv1.DaemonSet](t, o)
		ru := ds.Spec.UpdateStrategy.RollingUpdate
		surge := ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType && ru != nil && nonZero(ru.MaxSurge)
		return ds.Spec.Template.Spec, surge && ds.Spec.Template.Spec.HostNetwork
	case "Deployment":
		// A Deployment's rolling update surges by default (25%).
		d := typed[appsv1.Deployment](t, o)
		return d.Spec.Template.Spec, d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType && d.Spec.Template.Spec.HostNetwork
	}
	return corev1.PodSpec{}, false
}

// nonZero: a maxSurge of neither 0 nor 0%.
func nonZero(v *intstr.IntOrString) bool {
	if v == nil {
		return false
	}
	if v.Type == intstr.Int {
		return v.IntVal != 0
	}
	return strings.TrimSuffix(v.StrVal, "%") != "0"
}

// checkDataPlanePortsByNumber: the data-plane replica's probes go to the
// port its zerodrop process serves them on, by number (a name would resolve
// against no declared port), and the PodMonitor scrapes the metrics port
// it binds without naming a container port.
func checkDataPlanePortsByNumber(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	ds := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "zerodrop-data-plane"))
	zc := containerNamed(t, ds, "controller")
	probePort := bindPort(t, zc, "--health-probe-bind-address")
	for name, p := range map[string]*corev1.Probe{"readiness": zc.ReadinessProbe, "liveness": zc.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("controller container: no %s httpGet probe", name)
			continue
		}
		if port := p.HTTPGet.Port; port.Type != intstr.Int || int(port.IntVal) != probePort {
			t.Errorf("controller container: %s probe on port %s; want %d, the --health-probe-bind-address port, by number", name, port.String(), probePort)
		}
	}
	pm := find(t, objs, "PodMonitor", "zerodrop-data-plane")
	eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if len(eps) == 0 {
		t.Fatal("PodMonitor: no podMetricsEndpoints")
	}
	wantAddr := fmt.Sprintf(":%d", bindPort(t, zc, "--metrics-bind-address"))
	for _, e := range eps {
		ep, _ := e.(map[string]any)
		for _, field := range []string{"port", "portNumber", "targetPort"} {
			if v, ok := ep[field]; ok {
				t.Errorf("PodMonitor endpoint selects the pods' declared port by %s %v: they declare none, so it finds no target", field, v)
			}
		}
		rel, _, _ := unstructured.NestedSlice(ep, "relabelings")
		sets := 0
		for _, r := range rel {
			r, _ := r.(map[string]any)
			if r["targetLabel"] != "__address__" {
				continue
			}
			sets++
			if repl, _ := r["replacement"].(string); !strings.HasSuffix(repl, wantAddr) {
				t.Errorf("PodMonitor sets __address__ to %q; want the metrics port %s", repl, wantAddr)
			}
		}
		if sets == 0 {
			t.Error("PodMonitor endpoint sets no __address__: a port-less target has no port")
		}
	}
}
