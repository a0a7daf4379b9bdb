package install

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/cmd/haproxyrun"
	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// haproxyValues install the HAProxy data plane.
var haproxyValues = []string{"provider=haproxy", "haproxy.addressPool=192.0.2.0/24"}

// dataPlaneLeastPrivilege: a data-plane replica reads, and writes nothing
// but Events (one writer of the Services: the controller's leader).
var dataPlaneLeastPrivilege = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"services", "nodes", "pods"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
}

// containerArgs parses a container's `zerodrop controller` arguments as the
// controller does, and validates them.
func containerArgs(t *testing.T, c corev1.Container) controller.Config {
	t.Helper()
	if len(c.Args) == 0 || c.Args[0] != "controller" {
		t.Fatalf("container %s args %q: want the controller subcommand first", c.Name, c.Args)
	}
	args := make([]string, 0, len(c.Args)-1)
	for _, a := range c.Args[1:] {
		args = append(args, strings.ReplaceAll(a, "$(POD_NAMESPACE)", namespace))
	}
	cfg, err := controller.ParseArgs(args)
	if err != nil {
		t.Fatalf("container %s args %q: %v", c.Name, args, err)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the controller refuses container %s's arguments: %v", c.Name, err)
	}
	return cfg
}

// TestChartHAProxy: with provider=haproxy the chart installs the control
// Deployment and the data-plane DaemonSet wired to each other — the
// control role finds exactly the DaemonSet's pods on the port their state
// endpoint serves; each replica's zerodrop process attaches to its own
// pod's HAProxy container through the shared state directory and never
// starts one; the replicas write nothing to the API server but Events.
func TestChartHAProxy(t *testing.T) {
	objs := render(t, haproxyValues...)
	d := typed[appsv1.Deployment](t, find(t, objs, "Deployment", "zerodrop"))
	ctl, _ := controllerFlags(t, d)
	if ctl.Provider != "haproxy" || ctl.DataPlane.Role != string(service.RoleControl) || ctl.AddressPool != "192.0.2.0/24" {
		t.Errorf("controller: provider %q role %q pool %q; want haproxy, control, the values' pool", ctl.Provider, ctl.DataPlane.Role, ctl.AddressPool)
	}
	if d.Spec.Template.Labels["azure.workload.identity/use"] != "" {
		t.Error("provider=haproxy pods carry the Azure workload identity label")
	}

	ds := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "zerodrop-data-plane"))
	spec := ds.Spec.Template.Spec
	sel, err := labels.Parse(ctl.DataPlane.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if ctl.DataPlane.Namespace != ds.Namespace || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("--data-plane-namespace %s --data-plane-selector %s do not find the DaemonSet's pods (%s, %v)",
			ctl.DataPlane.Namespace, sel, ds.Namespace, ds.Spec.Template.Labels)
	}
	if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Error("--data-plane-selector also selects the controller's own pods")
	}
	if !spec.HostNetwork || len(spec.NodeSelector) == 0 {
		t.Errorf("data plane: hostNetwork %v, nodeSelector %v; want the host's network on the labelled nodes", spec.HostNetwork, spec.NodeSelector)
	}
	if len(spec.Containers) != 2 || spec.Containers[0].Name != "haproxy" || spec.Containers[1].Name != "controller" {
		t.Fatalf("data-plane containers %v: want haproxy and controller", spec.Containers)
	}
	hc, zc := spec.Containers[0], spec.Containers[1]
	dp := containerArgs(t, zc)
	if dp.Provider != "haproxy" || dp.DataPlane.Role != string(service.RoleDataPlane) {
		t.Errorf("data-plane process: provider %q role %q", dp.Provider, dp.DataPlane.Role)
	}
	if !strings.HasSuffix(dp.DataPlane.StateAddr, ":"+strconv.Itoa(ctl.DataPlane.StatePort)) {
		t.Errorf("state endpoint at %q; the controller reads port %d", dp.DataPlane.StateAddr, ctl.DataPlane.StatePort)
	}
	// The HAProxy container's directory, as `zerodrop haproxy` takes it.
	dir := haproxyrun.DefaultDir
	if len(hc.Args) == 0 || hc.Args[0] != "haproxy" {
		t.Fatalf("haproxy container args %q: want the haproxy subcommand", hc.Args)
	}
	for _, a := range hc.Args[1:] {
		if v, ok := strings.CutPrefix(a, "--dir="); ok {
			dir = v
		}
	}
	admin, master, cfgFile, err := haproxy.Paths(dir)
	if err != nil {
		t.Fatal(err)
	}
	if dp.HAProxy.AdminSocket != admin || dp.HAProxy.MasterSocket != master || dp.HAProxy.ConfigFile != cfgFile {
		t.Errorf("the replica attaches to %s %s %s; its HAProxy container serves %s %s %s",
			dp.HAProxy.AdminSocket, dp.HAProxy.MasterSocket, dp.HAProxy.ConfigFile, admin, master, cfgFile)
	}
	// The server-state file and the listener map, which the configuration
	// names, go to the state directory too: the HAProxy container reads
	// them when it restarts.
	stateDir := dp.HAProxy.Dir
	if stateDir == "" {
		stateDir = filepath.Dir(dp.HAProxy.ConfigFile)
	}
	if stateDir != dir {
		t.Errorf("the replica keeps HAProxy's server-state file in %s, not in the HAProxy container's %s", stateDir, dir)
	}
	if mountOf(hc, dir) == "" || mountOf(hc, dir) != mountOf(zc, dir) {
		t.Errorf("the state directory %s is on volume %q in the haproxy container and %q in the controller: want one shared volume",
			dir, mountOf(hc, dir), mountOf(zc, dir))
	}
	if sc := hc.SecurityContext; sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_BIND_SERVICE"}) ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("haproxy container capabilities %+v: want all dropped but NET_BIND_SERVICE", sc)
	}
	if sc := zc.SecurityContext; sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("controller container securityContext %+v: want no capability, a read-only root", sc)
	}

	if ds.Spec.Template.Spec.ServiceAccountName != "zerodrop-data-plane" {
		t.Errorf("data-plane pods run as %q", ds.Spec.Template.Spec.ServiceAccountName)
	}
	dcr := typed[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "zerodrop-data-plane"))
	if g := grantDiff(dcr.Rules, dataPlaneLeastPrivilege); g != "" {
		t.Errorf("ClusterRole zerodrop-data-plane: %s", g)
	}
	cr := typed[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "zerodrop"))
	if g := grantDiff(cr.Rules, leastPrivilege); g != "" {
		t.Errorf("ClusterRole zerodrop: %s", g)
	}
	leases := typed[rbacv1.Role](t, find(t, objs, "Role", "zerodrop-node-leases"))
	if leases.Namespace != "kube-node-lease" || grantDiff(leases.Rules, []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch"}}}) != "" {
		t.Errorf("node lease Role %s/%s grants %v: want read-only leases in kube-node-lease", leases.Namespace, leases.Name, leases.Rules)
	}
}

// mountOf names the volume mounted at or above path in c ("" if none).
func mountOf(c corev1.Container, path string) string {
	best, name := "", ""
	for _, m := range c.VolumeMounts {
		if (path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")) && len(m.MountPath) > len(best) {
			best, name = m.MountPath, m.Name
		}
	}
	return name
}
