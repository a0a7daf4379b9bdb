package netlab

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/kubeproxy"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestKubeProxyHealthCheckNodePort runs the real kube-proxy (nftables mode) in
// a node namespace against the test control plane and checks what a cloud
// load balancer sees of an externalTrafficPolicy: Local Service: the
// health-check node port answers 503 without a local endpoint, 200 with a
// ready local endpoint, 503 again when that endpoint is only
// terminating-but-serving, while the nodePort still forwards to it.
//
// The API server listens on the root namespace's loopback, which a node
// namespace cannot reach; a forwarder in the lab process listens on the node
// namespace's 127.0.0.1:6443 and dials the API server from the root namespace,
// so the API server's certificate (valid for 127.0.0.1) verifies as is.
func TestKubeProxyHealthCheckNodePort(t *testing.T) {
	requireRoot(t)
	assets, err := controlplane.Assets("kube-proxy")
	if err != nil {
		t.Fatal(err)
	}
	env := controlplane.StartEnv(t)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	ctx := context.Background()

	before := takeSnapshot(t) // kube-proxy must not leak into the root namespace either
	l := newLab(t, 1)
	node := l.Nodes[0]
	pod, err := l.AddPod(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	host, err := l.AddHost(ctx, "lb")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := startHTTP(l, pod.Netns, "0.0.0.0:8080"); err != nil {
		t.Fatal(err)
	}
	api, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Forward(node.Netns, "127.0.0.1:6443", api.Host); err != nil {
		t.Fatal(err)
	}
	kubeconfig := writeKubeconfig(t, env.Config, "https://127.0.0.1:6443")

	// kube-proxy takes the node IPs (and so the addresses it serves node ports
	// on) from the Node object.
	nodeName := "node-" + strconv.Itoa(node.Index)
	n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName},
		Spec:       corev1.NodeSpec{PodCIDR: node.PodCIDR.String(), PodCIDRs: []string{node.PodCIDR.String()}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: node.IP.String()}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	logFile, err := os.Create(filepath.Join(t.TempDir(), "kube-proxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("kube-proxy log (tail):\n%s", b)
		}
	}()
	kubeProxy, err := l.Start(node.Netns, logFile, logFile, filepath.Join(assets, "kube-proxy"),
		"--kubeconfig", kubeconfig,
		"--hostname-override", nodeName,
		"--proxy-mode", "nftables",
		"--cluster-cidr", "198.19.0.0/16",
		"--healthz-bind-address", "0.0.0.0:10256",
		"--metrics-bind-address", "127.0.0.1:10249",
		// Leave the kernel's conntrack table size alone: it is not per namespace.
		"--conntrack-max-per-core", "0",
		"--v", "2",
	)
	if err != nil {
		t.Fatal(err)
	}

	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeLoadBalancer,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := "http://" + net.JoinHostPort(node.IP.String(), strconv.Itoa(int(svc.Spec.HealthCheckNodePort))) + "/"
	np := "http://" + net.JoinHostPort(node.IP.String(), strconv.Itoa(int(svc.Spec.Ports[0].NodePort))) + "/"
	if svc.Spec.HealthCheckNodePort == 0 {
		t.Fatal("the API server allocated no health-check node port")
	}
	// The load balancer's view: it probes from its own namespace on the fabric.
	probe := func(want int) func() (bool, string) {
		return func() (bool, string) {
			code, body, err := get(ctx, host.DialContext, hc)
			if err != nil {
				return false, err.Error()
			}
			return code == want, fmt.Sprintf("%d %s", code, body)
		}
	}
	testutil.Eventually(t, 90*time.Second, "kube-proxy's health-check node port to answer 503 without endpoints", probe(http.StatusServiceUnavailable))

	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{pod.IP.String()},
			NodeName:   ptr.To(nodeName),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		}},
	}
	if slice, err = cs.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "health-check node port 200 with a ready local endpoint", probe(http.StatusOK))
	// The nodePort forwards, through kube-proxy's nftables rules, to the pod,
	// which sees the load balancer's own address (Local keeps the source).
	forwards := func() (bool, string) {
		code, body, err := get(ctx, host.DialContext, np)
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK && strings.HasPrefix(body, "peer="+host.IP.String()+":"), fmt.Sprintf("%d %s", code, body)
	}
	testutil.Eventually(t, 60*time.Second, "the nodePort to forward to the pod", forwards)
	if err := node.Run(ctx, "nft", "list", "table", "ip", "kube-proxy"); err != nil {
		t.Errorf("kube-proxy's nftables table is not in the node namespace: %v", err)
	}

	// What zerodrop's node-mode termination gate rests on (internal/drain):
	// kube-proxy syncs on a change (nftables mode: otherwise hourly), and
	// /healthz reports that sync (status.IPv4.lastUpdated) after the change
	// was written; the health-check node port, which the same sync updates
	// just after it reports itself, then answers 503 within 2 s (nothing
	// else changes, so no later sync could have carried it).
	kp := &kubeproxy.Client{Port: 10256, HTTP: &http.Client{Timeout: time.Second,
		Transport: &http.Transport{DialContext: host.DialContext, DisableKeepAlives: true}}}
	changed := time.Now()
	slice.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "kube-proxy's /healthz to report a sync after the endpoint turned terminating", func() (bool, string) {
		ok, err := kp.SyncedAfter(ctx, node.IP.String(), "IPv4", changed)
		if err != nil {
			return false, err.Error()
		}
		return ok, "last sync before the change"
	})
	testutil.Eventually(t, 2*time.Second, "the sync kube-proxy reported to have carried the change (health-check node port 503)", probe(http.StatusServiceUnavailable))
	testutil.Eventually(t, 60*time.Second, "the nodePort to still forward to the terminating-but-serving pod (KEP-1669)", forwards)

	// A kube-proxy stopped with SIGSTOP still accepts connections (the
	// kernel does) and never answers: /healthz reads fail, which keeps a
	// drain call waiting rather than answering on stale rules.
	kubeProxy.Signal(syscall.SIGSTOP)
	// kill returns once the signal is queued; each thread stops when it is
	// next scheduled, so one still running could answer the read below
	// (seen once in CI on a loaded machine). Read once every thread is.
	testutil.Eventually(t, 10*time.Second, "every thread of kube-proxy stopped", func() (bool, string) {
		return allStopped(kubeProxy.Pid())
	})
	if _, err := kp.Read(ctx, node.IP.String()); err == nil {
		t.Errorf("kube-proxy stopped with SIGSTOP answered /healthz")
	}
	kubeProxy.Signal(syscall.SIGCONT)

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(before, takeSnapshot(t)); d != "" {
		t.Errorf("root namespace changed by the lab with kube-proxy (-before +after):\n%s", d)
	}
}

// writeKubeconfig writes a kubeconfig for cfg's credentials at server.
func writeKubeconfig(t *testing.T, cfg *rest.Config, server string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["lab"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["lab"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: "lab"}
	kc.CurrentContext = "lab"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// allStopped reports whether every thread of process pid is stopped (state
// T in /proc/PID/task/TID/stat).
func allStopped(pid int) (bool, string) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false, err.Error()
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false, err.Error()
		}
		// pid (comm) state …: comm may hold spaces; the state follows its ")".
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false, fmt.Sprintf("thread %s: %.40s", task.Name(), b[max(i, 0):])
		}
	}
	return true, ""
}
