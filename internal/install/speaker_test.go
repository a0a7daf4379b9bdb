package install

import (
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"zerodrop.dev/zerodrop/internal/cmd/speaker"
)

var bgpValues = []string{"haproxy.bgp.enabled=true", "haproxy.bgp.asn=4200000001",
	"haproxy.bgp.peers[0].address=192.0.2.1", "haproxy.bgp.peers[0].asn=64512",
	"haproxy.bgp.peers[1].address=192.0.2.2", "haproxy.bgp.peers[1].asn=64512", "haproxy.bgp.peers[1].port=1179",
	"haproxy.bgp.passwordSecret=bgp", "haproxy.bgp.gracefulRestartTime=60s"}

// TestChartSpeaker: with haproxy.bgp.enabled the chart runs `zerodrop
// speaker` in a DaemonSet of its own on the data plane's nodes, which never
// surges (two speakers on one node would open two sessions from one
// address), on the host network, with arguments the command accepts (read
// back with its own parser: ASN, peers, the password file it mounts,
// graceful restart). Off by default; enabled without an ASN or a peer, the
// chart refuses with a message naming the value.
func TestChartSpeaker(t *testing.T) {
	objs := render(t, append(append([]string(nil), haproxyValues...), bgpValues...)...)
	ds := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "zerodrop-speaker"))
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ru == nil || ru.MaxSurge == nil || *ru.MaxSurge != intstr.FromInt32(0) {
		t.Errorf("update strategy %+v, want maxSurge 0", ds.Spec.UpdateStrategy)
	}
	spec := ds.Spec.Template.Spec
	dp := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "zerodrop-data-plane")).Spec.Template.Spec
	if !spec.HostNetwork || len(spec.NodeSelector) == 0 || spec.NodeSelector["zerodrop.dev/data-plane"] != dp.NodeSelector["zerodrop.dev/data-plane"] {
		t.Errorf("host network %v, node selector %v; want the host network on the data plane's nodes (%v)", spec.HostNetwork, spec.NodeSelector, dp.NodeSelector)
	}
	c := spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "speaker" {
		t.Fatalf("container args %q, want the speaker command", c.Args)
	}
	// The downward API's variables, as the kubelet sets them.
	t.Setenv("NODE_NAME", "node-a")
	t.Setenv("HOST_IP", "192.0.2.10")
	t.Setenv("POD_NAME", "zerodrop-speaker-x7k2p")
	t.Setenv("POD_NAMESPACE", namespace)
	var pwMount string
	for _, m := range c.VolumeMounts {
		pwMount = m.MountPath
	}
	args := c.Args[1:]
	for i, a := range args {
		if strings.HasPrefix(a, "--peer-password-file=") {
			// The Secret's file, written where the test can read it.
			f := t.TempDir() + "/password"
			if err := os.WriteFile(f, []byte("s3cret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(strings.TrimPrefix(a, "--peer-password-file="), pwMount+"/") {
				t.Errorf("%s is not in the Secret's mount %s", a, pwMount)
			}
			args[i] = "--peer-password-file=" + f
		}
	}
	cfg, err := speaker.Parse(args, io.Discard)
	if err != nil {
		t.Fatalf("speaker args %q: %v", c.Args, err)
	}
	sp := cfg.Speaker
	if sp.ASN != 4200000001 || len(sp.Peers) != 2 || sp.Peers[1].Port != 1179 || sp.Peers[0].Address != netip.MustParseAddr("192.0.2.1") ||
		sp.Peers[0].Password != "s3cret" || !sp.GracefulRestart.Enabled || sp.GracefulRestart.RestartTime != 60*time.Second {
		t.Errorf("parsed %+v", sp)
	}
	if len(cfg.Candidates) != 0 || cfg.Class != "zerodrop.dev/haproxy" {
		t.Errorf("candidates %v, class %q: want the Services of zerodrop.dev/haproxy", cfg.Candidates, cfg.Class)
	}
	if cfg.PodName != "zerodrop-speaker-x7k2p" || cfg.PodNamespace != namespace {
		t.Errorf("pod %s/%s, want the downward API's", cfg.PodNamespace, cfg.PodName)
	}
	if env := envNames(c); !env["NODE_NAME"] || !env["HOST_IP"] || !env["POD_NAME"] || !env["POD_NAMESPACE"] {
		t.Errorf("env %v, want NODE_NAME, HOST_IP, POD_NAME and POD_NAMESPACE", env)
	}
	// At its stop it reads its Pod and DaemonSet (bgp.ReadStopFacts): a
	// Role in the release's namespace, bound to its service account.
	role := typed[rbacv1.Role](t, find(t, objs, "Role", "zerodrop-speaker"))
	binding := typed[rbacv1.RoleBinding](t, find(t, objs, "RoleBinding", "zerodrop-speaker"))
	grants := func(group, resource string) bool {
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, "get") {
				return true
			}
		}
		return false
	}
	if !grants("", "pods") || !grants("apps", "daemonsets") || role.Namespace != ds.Namespace {
		t.Errorf("Role %s/%s rules %+v, want get on pods and daemonsets in the DaemonSet's namespace %s", role.Namespace, role.Name, role.Rules, ds.Namespace)
	}
	if binding.RoleRef.Kind != "Role" || binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
		binding.Subjects[0].Name != spec.ServiceAccountName || binding.Subjects[0].Namespace != ds.Namespace {
		t.Errorf("RoleBinding %+v, want %s bound to the service account %s", binding, role.Name, spec.ServiceAccountName)
	}

	for _, o := range render(t, haproxyValues...) {
		if o.GetName() == "zerodrop-speaker" {
			t.Errorf("%s %s rendered with haproxy.bgp.enabled unset", o.GetKind(), o.GetName())
		}
	}
	for _, tc := range []struct{ drop, want string }{
		{"haproxy.bgp.asn=", "haproxy.bgp.asn"},
		{"haproxy.bgp.peers[", "haproxy.bgp.peers"},
	} {
		var set []string
		for _, v := range bgpValues {
			if !strings.HasPrefix(v, tc.drop) {
				set = append(set, v)
			}
		}
		if _, err := template(t, append(append([]string(nil), haproxyValues...), set...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("without %s: %v, want a failure naming %s", tc.drop, err, tc.want)
		}
	}
}

func envNames(c corev1.Container) map[string]bool {
	out := map[string]bool{}
	for _, e := range c.Env {
		out[e.Name] = true
	}
	return out
}
