package install

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/probe"
)

// surgeValues turn the data plane's DaemonSet update into a surge, the
// chart's default, written out.
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
// Checked on the chart's renders, the data plane's own (default, a surge)
// strategy, a surge written out and one without surge. Without declared ports, the data plane's probes and its
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
		{name: "haproxy", set: append(append([]string{}, haproxyValues...), allFeatures...), surging: 1},
		{name: "haproxy without surge", set: append(append([]string{}, haproxyValues...), append(allFeatures,
			"haproxy.updateStrategy.rollingUpdate.maxSurge=0", "haproxy.updateStrategy.rollingUpdate.maxUnavailable=1")...)},
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

// checkDataPlanePortsByNumber: the data-plane replica's probes are exec
// probes of its own process through a unix socket in the pod's own volume
// — no port, so during a surge the node's other data-plane pod never
// answers them — and the ports two pods of one node bind do not collide:
// the second pod's state endpoint binds the alternate port, distinct from
// every port the first holds (its metrics wait for the first pod's port).
// The PodMonitor scrapes the metrics port it binds without naming a
// container port, and names each target's pod (the port refuses a scrape
// meant for the pod that does not hold it).
func checkDataPlanePortsByNumber(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	ds := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "zerodrop-data-plane"))
	zc := containerNamed(t, ds, "controller")
	dp := containerArgs(t, zc)
	if dp.ProbeAddr != "0" {
		t.Errorf("--health-probe-bind-address %q: want 0, no probe port (a host-network pod's port is the node's, shared in a surge)", dp.ProbeAddr)
	}
	if dp.ProbeSocket == "" {
		t.Fatal("the controller container serves its probes on no socket (--health-probe-socket)")
	}
	if vol := mountOf(zc, dp.ProbeSocket); !emptyDir(ds.Spec.Template.Spec, vol) {
		t.Errorf("probe socket %s is on volume %q: want an emptyDir of the pod's own", dp.ProbeSocket, vol)
	}
	for name, tc := range map[string]struct {
		p    *corev1.Probe
		path string
	}{"readiness": {zc.ReadinessProbe, "/readyz"}, "liveness": {zc.LivenessProbe, "/healthz"}} {
		p := tc.p
		if p == nil || p.Exec == nil || p.HTTPGet != nil || p.TCPSocket != nil || p.GRPC != nil {
			t.Errorf("controller container: %s probe %+v; want an exec probe only", name, p)
			continue
		}
		cmd := p.Exec.Command
		if len(cmd) < 3 || cmd[0] != "/zerodrop" || cmd[1] != "probe" || cmd[len(cmd)-1] != tc.path ||
			!slices.Contains(cmd, "--socket="+dp.ProbeSocket) {
			t.Errorf("controller container: %s probe runs %q; want /zerodrop probe --socket=%s ... %s", name, cmd, dp.ProbeSocket, tc.path)
		}
		timeout := probe.DefaultTimeout
		for _, a := range cmd {
			if v, ok := strings.CutPrefix(a, "--timeout="); ok {
				d, err := time.ParseDuration(v)
				if err != nil {
					t.Fatalf("%s probe: %s: %v", name, a, err)
				}
				timeout = d
			}
		}
		if limit := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second; timeout >= limit {
			t.Errorf("%s probe: zerodrop probe gives up after %s, not under the probe's timeout %s: the kubelet would end it first", name, timeout, limit)
		}
	}
	ports := map[string]int{"--state-bind-address": bindPort(t, zc, "--state-bind-address"),
		"--state-alternate-port": dp.DataPlane.StateAlternatePort, "--metrics-bind-address": bindPort(t, zc, "--metrics-bind-address")}
	seen := map[int]string{}
	for flag, port := range ports {
		if port == 0 {
			t.Errorf("%s: no port; a second pod on the node has nowhere to serve", flag)
		}
		if other, ok := seen[port]; ok {
			t.Errorf("%s and %s are both port %d: two pods of one node collide there", flag, other, port)
		}
		seen[port] = flag
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
		named := false
		for _, r := range rel {
			r, _ := r.(map[string]any)
			src, _ := r["sourceLabels"].([]any)
			named = named || r["targetLabel"] == "__param_"+controller.PodUIDParam && len(src) == 1 && src[0] == "__meta_kubernetes_pod_uid"
		}
		if !named {
			t.Errorf("PodMonitor endpoint does not name the target's pod (__param_%s from __meta_kubernetes_pod_uid): during a surge one pod's metrics would be scraped as the other's", controller.PodUIDParam)
		}
	}
}

// emptyDir: spec's volume name is an emptyDir (the pod's own).
func emptyDir(spec corev1.PodSpec, name string) bool {
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v.EmptyDir != nil
		}
	}
	return false
}
