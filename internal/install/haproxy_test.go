package install

import (
	"net"
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
	// Its state endpoint's certificate, asked for through the CSR API.
	{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"create", "get"}},
}

// controlLeastPrivilege: the control role's ClusterRole with the HAProxy data
// plane: leastPrivilege, and approving and signing the replicas' state
// endpoint certificates (its own signer only).
var controlLeastPrivilege = append(slices.Clone(leastPrivilege),
	rbacv1.PolicyRule{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"get", "list", "watch"}},
	rbacv1.PolicyRule{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests/approval", "certificatesigningrequests/status"}, Verbs: []string{"update"}},
	rbacv1.PolicyRule{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"}, ResourceNames: []string{"zerodrop.dev/data-plane-state"}, Verbs: []string{"approve", "sign"}},
)

// downwardAPI are the values the tests give the containers' fieldRef
// environment variables, as the kubelet would for a pod on a node.
var downwardAPI = map[string]string{
	"metadata.name":      "zerodrop-data-plane-x7k2p",
	"metadata.namespace": namespace,
	"metadata.uid":       "6f1c1d0e-0000-4000-8000-000000000001",
	"status.hostIP":      "192.0.2.10",
	"status.podIP":       "192.0.2.10",
}

// containerEnv sets c's downward-API environment variables in the test's
// environment (the controller's flags default to some) and returns a
// function that expands $(VAR) references to them in an argument.
func containerEnv(t *testing.T, c corev1.Container) func(string) string {
	t.Helper()
	vals := map[string]string{"POD_NAMESPACE": namespace}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			v, ok := downwardAPI[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Fatalf("container %s: env %s from %s, which the test does not know", c.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			vals[e.Name] = v
			t.Setenv(e.Name, v)
		}
	}
	return func(a string) string {
		for k, v := range vals {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		return a
	}
}

// containerArgs parses a container's `zerodrop controller` arguments as the
// controller does, and validates them.
func containerArgs(t *testing.T, c corev1.Container) controller.Config {
	t.Helper()
	if len(c.Args) == 0 || c.Args[0] != "controller" {
		t.Fatalf("container %s args %q: want the controller subcommand first", c.Name, c.Args)
	}
	expand := containerEnv(t, c)
	args := make([]string, 0, len(c.Args)-1)
	for _, a := range c.Args[1:] {
		args = append(args, expand(a))
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
	if !dp.AddressPoolGiven || dp.AddressPool != ctl.AddressPool {
		t.Errorf("data-plane process: --address-pool %q (given %v); want the control role's %q, so a replica binds only status addresses of that pool",
			dp.AddressPool, dp.AddressPoolGiven, ctl.AddressPool)
	}
	if !strings.HasSuffix(dp.DataPlane.StateAddr, ":"+strconv.Itoa(ctl.DataPlane.StatePort)) {
		t.Errorf("state endpoint at %q; the controller reads port %d", dp.DataPlane.StateAddr, ctl.DataPlane.StatePort)
	}
	if dp.DataPlane.StateAlternatePort == 0 || dp.DataPlane.StateAlternatePort != ctl.DataPlane.ReplicaAlternatePort {
		t.Errorf("state endpoint's alternate port %d (a node's second pod in a surge); the controller looks at %d", dp.DataPlane.StateAlternatePort, ctl.DataPlane.ReplicaAlternatePort)
	}
	// The state endpoint and the metrics bind the node's internal address
	// (host network), where the control role dials the pod's IP, not every
	// interface (HAProxy binds the Services' public addresses on the same
	// host). The probes bind no port (checkDataPlanePortsByNumber).
	for flag, addr := range map[string]string{"--state-bind-address": dp.DataPlane.StateAddr,
		"--metrics-bind-address": dp.MetricsAddr} {
		if host, _, err := net.SplitHostPort(addr); err != nil || host != downwardAPI["status.hostIP"] {
			t.Errorf("%s %q: want the node's address %s (status.hostIP) (%v)", flag, addr, downwardAPI["status.hostIP"], err)
		}
	}
	// Its certificate names the replica's pod: the downward API's.
	if dp.DataPlane.PodUID != downwardAPI["metadata.uid"] || dp.DataPlane.PodName != downwardAPI["metadata.name"] || dp.DataPlane.PodNamespace != namespace {
		t.Errorf("replica's pod %s/%s uid %s: want the downward API's", dp.DataPlane.PodNamespace, dp.DataPlane.PodName, dp.DataPlane.PodUID)
	}
	if ctl.DataPlane.CASecret == "" {
		t.Error("the control role names no CA Secret")
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
	if sc := hc.SecurityContext; sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_BIND_SERVICE", "KILL", "SETGID", "SETUID"}) ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("haproxy container capabilities %+v: want all dropped but NET_BIND_SERVICE (binding ports below 1024), KILL, SETGID and SETUID (HAProxy's workers as another user)", sc)
	}
	if sc := zc.SecurityContext; sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_BIND_SERVICE"}) ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("controller container securityContext %+v: want all capabilities dropped but NET_BIND_SERVICE (a new listener's port probed before a reload), a read-only root", sc)
	}

	if ds.Spec.Template.Spec.ServiceAccountName != "zerodrop-data-plane" {
		t.Errorf("data-plane pods run as %q", ds.Spec.Template.Spec.ServiceAccountName)
	}
	dcr := typed[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "zerodrop-data-plane"))
	if g := grantDiff(dcr.Rules, dataPlaneLeastPrivilege); g != "" {
		t.Errorf("ClusterRole zerodrop-data-plane: %s", g)
	}
	cr := typed[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "zerodrop"))
	if g := grantDiff(cr.Rules, controlLeastPrivilege); g != "" {
		t.Errorf("ClusterRole zerodrop: %s", g)
	}
	// The control role reads and rotates the state endpoint's CA Secret.
	role := typed[rbacv1.Role](t, find(t, objs, "Role", "zerodrop"))
	caGranted := false
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "secrets") && slices.Contains(r.ResourceNames, ctl.DataPlane.CASecret) &&
			slices.Contains(r.Verbs, "get") && slices.Contains(r.Verbs, "update") {
			caGranted = true
		}
	}
	if !caGranted {
		t.Errorf("Role zerodrop grants no get and update on the CA Secret %s: %v", ctl.DataPlane.CASecret, role.Rules)
	}
	// The control role publishes the CAs' certificates in the ConfigMap of
	// the Secret's name; each replica reads only that one, to renew its
	// certificate early when they change (issue 46, M6).
	if dp.DataPlane.CASecret != ctl.DataPlane.CASecret {
		t.Errorf("the replicas read the CAs from ConfigMap %q; the control role publishes them in %q", dp.DataPlane.CASecret, ctl.DataPlane.CASecret)
	}
	cmGranted := false
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "configmaps") && slices.Contains(r.ResourceNames, ctl.DataPlane.CASecret) &&
			slices.Contains(r.Verbs, "get") && slices.Contains(r.Verbs, "update") {
			cmGranted = true
		}
	}
	if !cmGranted {
		t.Errorf("Role zerodrop grants no get and update on the CA ConfigMap %s: %v", ctl.DataPlane.CASecret, role.Rules)
	}
	dpRole := typed[rbacv1.Role](t, find(t, objs, "Role", "zerodrop-data-plane"))
	if g := grantDiff(dpRole.Rules, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
		ResourceNames: []string{ctl.DataPlane.CASecret}, Verbs: []string{"get"}}}); g != "" || dpRole.Namespace != namespace {
		t.Errorf("Role %s/zerodrop-data-plane: %s; want get on the CA ConfigMap only, in %s", dpRole.Namespace, g, namespace)
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
