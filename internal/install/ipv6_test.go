package install

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/dataplane"
	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/probe"
	"zerodrop.dev/zerodrop/internal/testutil"
	"zerodrop.dev/zerodrop/internal/webhook"
)

// The IPv6 cluster of TestChartIPv6DataPlane: the node's address (its
// status.hostIP), another address of the node (a Service's, as HAProxy binds
// them on lo), the service ranges and the drain Service's address in the
// IPv6 one. The test's kube-apiserver serves on 127.0.0.1, and the API
// server wants its primary service range in its own address' family: so
// the cluster is dual-stack, IPv4 first — the case where a drain Service
// without ipFamilies would be given the primary family, IPv4, and its IPv6
// clusterIP refused.
const (
	v6HostIP       = "fd00::a"
	v6OtherIP      = "fd00::b"
	v6ServiceRange = "10.0.0.0/16,fd00:10:96::/108"
	v6DrainIP      = "fd00:10:96::5a"
)

// TestChartIPv6DataPlane (issue 46, High 2 and M3): the chart installed on an
// IPv6 cluster. The node is a network namespace the test makes, with
// fd00::a (its status.hostIP) and fd00::b (a Service address) on lo; the
// data-plane replica runs there as the DaemonSet's containers would: the
// real zerodrop binary (`zerodrop haproxy` and `zerodrop controller`) with
// the rendered arguments, $(HOST_IP) expanded as the kubelet expands $(VAR)
// references. It wants: the replica starts, its state endpoint listens on
// [fd00::a]:9092 and the control role reads it (over the authenticated TLS,
// as dataplane.Remote does); its probe and metrics ports answer on the
// node's address (where the kubelet probes a host-network pod) and on no
// other address of the node; the drain Service is IPv6 and a kube-apiserver
// with an IPv6 service range accepts it at the chart's address; and a drain
// call on the URLs the webhook builds from that address (the relay's
// --target, the direct hook) reaches a drain server listening there.
func TestChartIPv6DataPlane(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes a network namespace")
	}
	objs := render(t, append(slices.Clone(haproxyValues), "drain.clusterIP="+v6DrainIP)...)

	// The drain Service, in the address' family, on an IPv6 cluster.
	drainSvc := typed[corev1.Service](t, find(t, objs, "Service", "zerodrop-drain"))
	if f := drainSvc.Spec.IPFamilies; len(f) != 1 || f[0] != corev1.IPv6Protocol {
		t.Errorf("drain Service ipFamilies %v, want [IPv6] for clusterIP %s", f, v6DrainIP)
	}
	env := controlplane.StartEnvServiceRange(t, v6ServiceRange)
	restCfg := env.Config
	c := testutil.Client(t, restCfg)
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	drainSvc.Namespace = namespace
	if err := c.Create(ctx, drainSvc); err != nil {
		t.Errorf("the API server (service range %s) refuses the chart's drain Service: %v", v6ServiceRange, err)
	} else if drainSvc.Spec.ClusterIP != v6DrainIP {
		t.Errorf("drain Service clusterIP %s, want %s", drainSvc.Spec.ClusterIP, v6DrainIP)
	}
	ctl, _ := controllerFlags(t, typed[appsv1.Deployment](t, find(t, objs, "Deployment", "zerodrop")))
	if ctl.Webhook.DrainHost != v6DrainIP {
		t.Fatalf("--webhook-drain-host %q, want %s", ctl.Webhook.DrainHost, v6DrainIP)
	}

	node := ipv6Node(t)
	bin := zerodropBinary(t)

	// The replica's pod, as the DaemonSet makes it, authenticated as the
	// kubelet's projected token would be.
	ds := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "zerodrop-data-plane"))
	hc, zc := containerNamed(t, ds, "haproxy"), containerNamed(t, ds, "controller")
	testutil.AdminServiceAccount(t, restCfg, namespace, ds.Spec.Template.Spec.ServiceAccountName)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "zerodrop-data-plane-v6x7k", Labels: ds.Spec.Template.Labels},
		Spec: ds.Spec.Template.Spec}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, e := range zc.Env {
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
			continue
		}
		switch e.ValueFrom.FieldRef.FieldPath {
		case "metadata.name":
			vars[e.Name] = pod.Name
		case "metadata.namespace":
			vars[e.Name] = pod.Namespace
		case "metadata.uid":
			vars[e.Name] = string(pod.UID)
		case "status.hostIP", "status.podIP":
			vars[e.Name] = v6HostIP
		default:
			t.Fatalf("env %s from %s, which the test does not know", e.Name, e.ValueFrom.FieldRef.FieldPath)
		}
	}
	shared := t.TempDir()
	mount := ""
	for _, m := range hc.VolumeMounts {
		if m.Name == "state" {
			mount = m.MountPath
		}
	}
	localize := func(a string) string {
		a = strings.ReplaceAll(a, mount, shared)
		for k, v := range vars { // as the kubelet expands $(VAR) in args
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		return a
	}
	kubeconfig := nodeKubeconfig(t, node, testutil.PodConfig(t, restCfg, pod))

	// The haproxy container, then the controller container, in the node.
	hargs := []string{}
	for _, a := range hc.Args {
		hargs = append(hargs, localize(a))
	}
	for _, a := range hargs {
		if dir, ok := strings.CutPrefix(a, "--dir="); ok {
			t.Cleanup(func() { testutil.StopHAProxy(t, dir) })
		}
	}
	hLog := startInNode(t, node, bin, hargs, nil)
	zargs := []string{}
	for _, a := range zc.Args {
		zargs = append(zargs, localize(a))
	}
	zargs = append(zargs, "--kubeconfig="+kubeconfig)
	t.Logf("controller container: zerodrop %s", strings.Join(zargs, " "))
	var zenv []string
	for k, v := range vars {
		zenv = append(zenv, k+"="+v)
	}
	ctlLog := startInNode(t, node, bin, zargs, zenv)

	// The control role reads the replica's state endpoint on [fd00::a]:9092,
	// as Discovery dials a replica: its pod IP and the state port.
	tlsFor := stateAuthority(t, restCfg, namespace, labels.SelectorFromSet(ds.Spec.Selector.MatchLabels))
	base := "https://" + net.JoinHostPort(v6HostIP, fmt.Sprint(bindPort(t, zc, "--state-bind-address")))
	remote := &dataplane.Remote{Replica: pod.Name, BaseURL: base, Client: &http.Client{Timeout: 5 * time.Second,
		Transport: &http.Transport{DialContext: node.DialContext, TLSClientConfig: tlsFor(string(pod.UID))}}}
	testutil.Eventually(t, 90*time.Second, "the control role to read the replica's state at "+base, func() (bool, string) {
		_, err := remote.Backends(ctx, "default/web")
		return err == nil, fmt.Sprintf("%v; controller log:\n%s\nhaproxy container log:\n%s", err, ctlLog.tail(20), hLog.tail(10))
	})

	// The kubelet's liveness probe (an exec of zerodrop probe, through the
	// process' socket: no port), and the metrics port on the node's
	// address, nowhere else.
	metricsPort := bindPort(t, zc, "--metrics-bind-address")
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: node.DialContext}}
	var probeArgs []string
	for _, a := range zc.LivenessProbe.Exec.Command[2:] {
		probeArgs = append(probeArgs, localize(a))
	}
	testutil.Eventually(t, 30*time.Second, "the kubelet's liveness probe", func() (bool, string) {
		var out bytes.Buffer
		code := probe.Run(ctx, probeArgs, &out, &out)
		return code == 0, fmt.Sprintf("exit %d: %s", code, out.String())
	})
	// The metrics server is a runnable of its own (a secure one makes its
	// certificate first): it may listen after the probes do.
	testutil.Eventually(t, 30*time.Second, "the metrics port on the node's address", func() (bool, string) {
		conn, err := node.DialContext(ctx, "tcp", net.JoinHostPort(v6HostIP, fmt.Sprint(metricsPort)))
		if err == nil {
			conn.Close()
		}
		return err == nil, fmt.Sprint(err)
	})
	for _, other := range []string{v6OtherIP, "127.0.0.1", "::1"} {
		for name, port := range map[string]int{"metrics": metricsPort, "state": bindPort(t, zc, "--state-bind-address")} {
			addr := net.JoinHostPort(other, fmt.Sprint(port))
			if conn, err := node.DialContext(ctx, "tcp", addr); err == nil {
				conn.Close()
				t.Errorf("the %s port is served on %s, another address of the node than its status.hostIP %s", name, addr, v6HostIP)
			}
		}
	}

	// A drain call on the URLs the webhook builds from drain.clusterIP.
	var mu sync.Mutex
	var calls []string
	ln, err := node.Listen("tcp", net.JoinHostPort(v6DrainIP, fmt.Sprint(ctl.Webhook.DrainPort)))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, r.URL.RequestURI())
		mu.Unlock()
		_, _ = io.WriteString(w, "drained\n")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	for _, relay := range []bool{true, false} {
		url := drainURL(t, ctl.Webhook, relay)
		if err := getOK(plain, url); err != nil {
			t.Errorf("drain call (relay %v) on %s: %v", relay, url, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 {
		t.Errorf("the drain server at [%s] got %q, want the relay's call and the direct hook's", v6DrainIP, calls)
	}
}

// drainURL is the URL a drain call for pod default/web-0 takes, built by the
// webhook from o: the relay's --target with the drain path (relay), or the
// direct preStop hook's httpGet as the kubelet turns it into a URL.
func drainURL(t *testing.T, o webhook.Options, relay bool) string {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	d := webhook.Drain{Host: o.DrainHost, Port: o.DrainPort}
	if relay {
		d.Relay = &webhook.Relay{Image: "zerodrop", Port: o.DrainRelayPort}
	}
	webhook.Mutate(pod, "default", []*corev1.Service{svc}, d, nil)
	if relay {
		for _, c := range pod.Spec.InitContainers {
			if i := slices.Index(c.Args, "--target"); c.Name == webhook.RelayContainer && i >= 0 && i+1 < len(c.Args) {
				return strings.TrimSuffix(c.Args[i+1], "/") + "/drain?pod=default/web-0"
			}
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--target="); ok && c.Name == webhook.RelayContainer {
					return strings.TrimSuffix(v, "/") + "/drain?pod=default/web-0"
				}
			}
		}
		t.Fatalf("no relay --target injected: %+v", pod.Spec.InitContainers)
	}
	h := pod.Spec.Containers[0].Lifecycle
	if h == nil || h.PreStop == nil || h.PreStop.HTTPGet == nil {
		t.Fatalf("no drain hook injected: %+v", pod.Spec.Containers[0])
	}
	g := h.PreStop.HTTPGet
	// The kubelet's httpGet handler: scheme://JoinHostPort(host, port)/path.
	return "http://" + net.JoinHostPort(g.Host, g.Port.String()) + g.Path
}

// ipv6Node is a network namespace standing for an IPv6 node: lo up with the
// node's address, another address (a Service's) and the drain address on
// it. It is deleted when the test ends, whatever its outcome.
func ipv6Node(t *testing.T) *netlab.Netns {
	t.Helper()
	// Named as a lab run's namespaces are (netlab.NamePrefix, this
	// process' ID): the lab tests of other packages, which may run at the
	// same time and check that the root namespace is as they found it,
	// leave other processes' namespaces out of that check.
	name := fmt.Sprintf("%s-%d-v6", netlab.NamePrefix, os.Getpid())
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	_ = exec.Command("ip", "netns", "del", name).Run() // a leftover of a killed run
	run("netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", name, err, out)
		}
	})
	run("-n", name, "link", "set", "lo", "up")
	for _, a := range []string{v6HostIP, v6OtherIP, v6DrainIP} {
		run("-n", name, "-6", "addr", "add", a+"/128", "dev", "lo", "nodad")
	}
	return &netlab.Netns{Name: name}
}

// nodeKubeconfig writes a kubeconfig for cfg usable inside node: the API
// server listens on the root namespace's loopback, so the test relays a
// listener at the same address inside the node to it (the API server's
// certificate names that address).
func nodeKubeconfig(t *testing.T, node *netlab.Netns, cfg *rest.Config) string {
	t.Helper()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := node.Listen("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
			if err != nil {
				in.Close()
				continue
			}
			conns.Add(2)
			pipe := func(dst, src net.Conn) {
				defer conns.Done()
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(in, out)
			go pipe(out, in)
		}
	}()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, CertificateAuthority: cfg.CAFile}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// logBuffer is a process's output, safe to read while it runs.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// tail is the last n lines written.
func (l *logBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(strings.TrimRight(l.b.String(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// startInNode starts bin with args inside node (`ip netns exec`, which execs
// it: the process is bin itself) in its own process group, with env added
// to the test's environment, and kills the group when the test ends.
func startInNode(t *testing.T, node *netlab.Netns, bin string, args, env []string) *logBuffer {
	t.Helper()
	out := &logBuffer{}
	cmd := exec.Command("ip", append([]string{"netns", "exec", node.Name, bin}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	testutil.StartGroup(t, cmd)
	return out
}

// containerNamed is the DaemonSet's container called name.
func containerNamed(t *testing.T, ds *appsv1.DaemonSet, name string) corev1.Container {
	t.Helper()
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("DaemonSet %s has no container %s", ds.Name, name)
	return corev1.Container{}
}

// bindPort is the port of c's listen-address flag (--flag=[host]:port): the
// data-plane pod declares no container ports (a host-network pod's would be
// host ports, which a surge replica on the node could not have).
func bindPort(t *testing.T, c corev1.Container, flag string) int {
	t.Helper()
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			_, port, err := net.SplitHostPort(v)
			if err != nil {
				t.Fatalf("container %s: %s=%s: %v", c.Name, flag, v, err)
			}
			n, err := strconv.Atoi(port)
			if err != nil {
				t.Fatalf("container %s: %s=%s: %v", c.Name, flag, v, err)
			}
			return n
		}
	}
	t.Fatalf("container %s has no %s", c.Name, flag)
	return 0
}
