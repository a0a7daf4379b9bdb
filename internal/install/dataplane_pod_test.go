package install

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/cmd/haproxyrun"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/probe"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestChartDataPlanePodRuns runs the chart's data-plane pod as rendered, on
// the real apiserver and a real HAProxy: the haproxy container's command
// (`zerodrop haproxy`, parsed from its args; the process it execs started
// here), and the controller container's `zerodrop controller` arguments in
// process. What is changed: the container's paths, moved from the shared
// volume's mountPath to a directory of the test; its ports, to free ones
// (the pod runs on the host's network); metrics over plain HTTP (the API
// server's authentication of scrapers is not this test's); and the backend
// address map the loopback tests need (API servers refuse loopback
// endpoints; see docs/design.md). With a Service whose
// status has the address the control role gave it, the replica serves the
// listener there; its server-state file is in the shared directory; and
// when the HAProxy container is killed and started again, the same
// listener is served from what the replica wrote.
func TestChartDataPlanePodRuns(t *testing.T) {
	// The pool holds the status address below: a replica binds only
	// status addresses of the pool the chart gives it.
	ds := typed[appsv1.DaemonSet](t, find(t, render(t, "provider=haproxy", "haproxy.addressPool=127.0.105.0/24"), "DaemonSet", "zerodrop-data-plane"))
	hc, zc := ds.Spec.Template.Spec.Containers[0], ds.Spec.Template.Spec.Containers[1]
	shared := t.TempDir()
	mount := ""
	for _, m := range hc.VolumeMounts {
		if m.Name == "state" {
			mount = m.MountPath
		}
	}
	if mount == "" {
		t.Fatal("the haproxy container mounts no state volume")
	}
	// localize moves a container's path on the shared volume here, and a
	// port to a free one.
	ports := map[string]int{}
	localize := func(a string) string {
		a = strings.ReplaceAll(a, mount, shared)
		a = strings.ReplaceAll(strings.ReplaceAll(a, "[$(HOST_IP)]", ""), "$(HOST_IP)", "")
		for _, flag := range []string{"--state-bind-address", "--metrics-bind-address", "--health-probe-bind-address"} {
			if strings.HasPrefix(a, flag+"=:") {
				ports[flag] = testutil.FreePort(t)
				return fmt.Sprintf("%s=127.0.0.1:%d", flag, ports[flag])
			}
		}
		return a
	}

	// The haproxy container.
	hargs := make([]string, 0, len(hc.Args))
	for _, a := range hc.Args[1:] {
		hargs = append(hargs, localize(a))
	}
	hcfg, err := haproxyrun.Parse(hargs, os.Stderr)
	if err != nil {
		t.Fatalf("haproxy container args %q: %v", hc.Args, err)
	}
	t.Cleanup(func() { testutil.StopHAProxy(t, hcfg.Dir) })
	container := func() *exec.Cmd {
		path, args, err := haproxyrun.Prepare(hcfg, os.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(path, args...)
		testutil.StartGroup(t, cmd)
		return cmd
	}
	hproc := container()
	// The validator `zerodrop haproxy` starts beside HAProxy, which the
	// controller's --haproxy-validate-socket names: here in process (the
	// test binary is not zerodrop), on the same socket.
	vln, err := haproxy.ListenValidation(hcfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	vctx, vstop := context.WithCancel(context.Background())
	t.Cleanup(vstop)
	go func() { _ = haproxy.ServeValidation(vctx, vln, hcfg.Binary, hcfg.Dir, logr.Discard()) }()

	// The controller container, in process.
	restCfg := controlplane.Start(t)
	// The replica's pod, as the DaemonSet makes it, and what the downward
	// API gives its controller container; the process authenticates as the
	// pod (a token bound to it, as the kubelet's projected token).
	c := testutil.Client(t, restCfg)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "zerodrop-data-plane-x7k2p", Labels: ds.Spec.Template.Labels},
		Spec: ds.Spec.Template.Spec}
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	testutil.AdminServiceAccount(t, restCfg, namespace, ds.Spec.Template.Spec.ServiceAccountName)
	if err := c.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	for _, e := range zc.Env {
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
			continue
		}
		switch e.ValueFrom.FieldRef.FieldPath {
		case "metadata.name":
			t.Setenv(e.Name, pod.Name)
		case "metadata.namespace":
			t.Setenv(e.Name, pod.Namespace)
		case "metadata.uid":
			t.Setenv(e.Name, string(pod.UID))
		case "status.hostIP", "status.podIP":
			t.Setenv(e.Name, "127.0.0.1")
		}
	}
	zargs := make([]string, 0, len(zc.Args))
	for _, a := range zc.Args[1:] {
		zargs = append(zargs, localize(a))
	}
	cfg, err := controller.ParseArgs(zargs)
	if err != nil {
		t.Fatalf("controller container args %q: %v", zc.Args, err)
	}
	cfg.RESTConfig, cfg.Registerer = testutil.PodConfig(t, restCfg, pod), prometheus.NewRegistry()
	cfg.MetricsSecure = false
	cfg.AddressMap = "198.18.0.0/15=127.18.0.0/15"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- controller.RunConfig(ctx, cfg) }()
	t.Cleanup(func() { testutil.StopManager(t, cancel, done) })

	// A Service as the control role leaves it: an address in its status.
	const ns, name, addr = "default", "web", "127.0.105.1"
	svc := testutil.LBService(ns, name, "zerodrop.dev/haproxy", int32(testutil.FreePort(t)), 8080)
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: addr}}
	if err := c.Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, testutil.Slice(ns, name, 8080, "198.18.65.1")); err != nil {
		t.Fatal(err)
	}
	admin, master, config, err := haproxy.Paths(hcfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := haproxy.New(ctx, haproxy.Options{AdminSocket: admin, MasterSocket: master, ConfigFile: config, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	served := func() (bool, string) {
		lb, err := obs.Observe(ctx, ns+"/"+name)
		if err != nil || lb == nil || len(lb.Listeners) != 1 {
			return false, fmt.Sprintf("lb=%v err=%v", lb, err)
		}
		l := lb.Listeners[0]
		return l.Address == addr && len(l.Backends) == 1 && l.Backends[0].State == model.Active,
			fmt.Sprintf("listener at %s, backends %v", l.Address, testutil.Backends(lb))
	}
	testutil.Eventually(t, 60*time.Second, "the replica to serve the Service at its status address", served)
	if _, err := os.Stat(filepath.Join(hcfg.Dir, "server-state")); err != nil {
		t.Errorf("no server-state file in the shared state directory: %v", err)
	}
	// The state endpoint answers the control role (its CA signed the
	// replica's certificate for this pod) over TLS.
	tlsFor := stateAuthority(t, restCfg, namespace, labels.SelectorFromSet(ds.Spec.Selector.MatchLabels))
	stateClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsFor(string(pod.UID))}}
	testutil.Eventually(t, 60*time.Second, "the state endpoint", func() (bool, string) {
		err := getOK(stateClient, fmt.Sprintf("https://127.0.0.1:%d/v1/loadbalancer?key=%s/%s", ports["--state-bind-address"], ns, name))
		return err == nil, fmt.Sprint(err)
	})

	// The kubelet's exec probes as rendered: `zerodrop probe` in the
	// controller container, asking its process through the socket in the
	// pod's volume (no port: the node's other data-plane pod, in a surge,
	// holds the node's ports).
	for name, p := range map[string]*corev1.Probe{"readiness": zc.ReadinessProbe, "liveness": zc.LivenessProbe} {
		if p == nil || p.Exec == nil || len(p.Exec.Command) < 2 || p.Exec.Command[1] != "probe" {
			t.Fatalf("%s probe %+v: want an exec of zerodrop probe", name, p)
		}
		args := make([]string, 0, len(p.Exec.Command))
		for _, a := range p.Exec.Command[2:] {
			args = append(args, localize(a))
		}
		testutil.Eventually(t, 60*time.Second, "the "+name+" exec probe to pass", func() (bool, string) {
			var out bytes.Buffer
			code := probe.Run(ctx, args, &out, &out)
			return code == 0, fmt.Sprintf("zerodrop probe %s: exit %d: %s", strings.Join(args, " "), code, out.String())
		})
	}

	// The HAProxy container crashes and the kubelet starts it again.
	_ = syscall.Kill(-hproc.Process.Pid, syscall.SIGKILL)
	testutil.Eventually(t, 30*time.Second, "HAProxy gone", func() (bool, string) { return obs.Alive(ctx) != nil, "" })
	container()
	testutil.Eventually(t, 60*time.Second, "the restarted HAProxy container to serve the same listener", served)
}

// getOK GETs url with c and wants 200.
func getOK(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
