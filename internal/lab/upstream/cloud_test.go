package upstream

import (
	"net/netip"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testService(policy corev1.ServiceExternalTrafficPolicy) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "1234abcd-0000-1111-2222-333344445555"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: policy,
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, NodePort: 30080, Protocol: corev1.ProtocolTCP},
				{Name: "alt", Port: 8080, NodePort: 30081},
			}},
	}
	if policy == corev1.ServiceExternalTrafficPolicyLocal {
		svc.Spec.HealthCheckNodePort = 31000
	}
	return svc
}

func testNode(name string, addrs ...corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
}

// TestExpected pins the load balancer cloud-provider-azure builds for a
// Service: a rule per port named <"a"+UID>-<protocol>-<port>, every node
// by its IPv4 InternalIP at the port's nodePort, and the probe per traffic
// policy: Local, HTTP GET /healthz on the health-check node port for every
// rule; Cluster, TCP on each port's nodePort; every 5 s, 2 results.
func TestExpected(t *testing.T) {
	nodes := []*corev1.Node{
		testNode("node-b", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.2"}),
		testNode("node-a", corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "192.0.2.1"},
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00::1"},
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}),
		testNode("node-c"), // no address yet: not in the pool
	}
	pool := []Member{{"node-a", "10.0.0.1"}, {"node-b", "10.0.0.2"}}
	const name = "a1234abcd00001111222233334444555" // "a" and the UID without dashes, 32 characters at most

	local, err := Expected(testService(corev1.ServiceExternalTrafficPolicyLocal), nodes, "198.18.128.1")
	if err != nil {
		t.Fatal(err)
	}
	hc := Probe{Protocol: ProbeHTTP, Port: 31000, Path: "/healthz", IntervalSeconds: 5, Threshold: 2}
	want := LB{Name: name, Service: "default/web", Address: "198.18.128.1", Pool: pool, Rules: []Rule{
		{Name: name + "-TCP-80", Port: 80, BackendPort: 30080, Probe: hc},
		{Name: name + "-TCP-8080", Port: 8080, BackendPort: 30081, Probe: hc},
	}}
	if !reflect.DeepEqual(local, want) {
		t.Errorf("Local:\n got %+v\nwant %+v", local, want)
	}

	cluster, err := Expected(testService(corev1.ServiceExternalTrafficPolicyCluster), nodes, "198.18.128.1")
	if err != nil {
		t.Fatal(err)
	}
	want.Rules = []Rule{
		{Name: name + "-TCP-80", Port: 80, BackendPort: 30080, Probe: Probe{Protocol: ProbeTCP, Port: 30080, IntervalSeconds: 5, Threshold: 2}},
		{Name: name + "-TCP-8080", Port: 8080, BackendPort: 30081, Probe: Probe{Protocol: ProbeTCP, Port: 30081, IntervalSeconds: 5, Threshold: 2}},
	}
	if !reflect.DeepEqual(cluster, want) {
		t.Errorf("Cluster:\n got %+v\nwant %+v", cluster, want)
	}

	affinity := testService(corev1.ServiceExternalTrafficPolicyCluster)
	affinity.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	if lb, err := Expected(affinity, nodes, "198.18.128.1"); err != nil || !lb.Rules[0].SourceIP {
		t.Errorf("sessionAffinity ClientIP: %+v, %v; want the SourceIP distribution", lb, err)
	}
	udp := testService(corev1.ServiceExternalTrafficPolicyCluster)
	udp.Spec.Ports[1].Protocol = corev1.ProtocolUDP
	if _, err := Expected(udp, nodes, "198.18.128.1"); err == nil {
		t.Error("a UDP port: no error; HAProxy cannot balance it")
	}
}

// TestRender pins the configuration: one proxy per rule with the rule's
// name, its frontend, a server per pool member at the nodePort with the
// probe's check (interval, threshold both ways, probe port), HTTP probes
// passing on 200 only, no retry, Azure's 4-minute idle timeout; the same
// load balancers render to the same bytes whatever order they were put in,
// the state line reads back, and haproxy -c accepts it.
func TestRender(t *testing.T) {
	dir := t.TempDir()
	h := NewHAProxy(dir, "")
	nodes := []*corev1.Node{testNode("node-a", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.1"})}
	local, err := Expected(testService(corev1.ServiceExternalTrafficPolicyLocal), nodes, "198.18.128.1")
	if err != nil {
		t.Fatal(err)
	}
	other := testService(corev1.ServiceExternalTrafficPolicyCluster)
	other.UID, other.Name = "ffff", "other"
	cluster, err := Expected(other, nodes, "198.18.128.2")
	if err != nil {
		t.Fatal(err)
	}
	var st1, st2 State
	st1.put(local)
	st1.put(cluster)
	st2.put(cluster)
	st2.put(local)
	cfg1, err := h.render(st1)
	if err != nil {
		t.Fatal(err)
	}
	cfg2, err := h.render(st2)
	if err != nil {
		t.Fatal(err)
	}
	if string(cfg1) != string(cfg2) {
		t.Errorf("the same load balancers rendered differently:\n%s\n---\n%s", cfg1, cfg2)
	}
	text := string(cfg1)
	for _, want := range []string{
		"    stats socket " + filepath.Join(dir, "admin.sock") + " mode 600 level admin expose-fd listeners\n",
		"    retries 0\n",
		"    timeout client 240000ms\n",
		"    timeout server 240000ms\n",
		"listen a1234abcd00001111222233334444555-TCP-80\n    bind 198.18.128.1:80\n    balance random(1)\n" +
			"    option httpchk GET /healthz\n    http-check expect status 200\n" +
			"    server node-a 10.0.0.1:30080 check inter 5s rise 2 fall 2 port 31000\n",
		"listen affff-TCP-8080\n    bind 198.18.128.2:8080\n    balance random(1)\n" +
			"    server node-a 10.0.0.1:30081 check inter 5s rise 2 fall 2 port 30081\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("configuration lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "redispatch") {
		t.Errorf("configuration redispatches:\n%s", text)
	}
	if d := description(cfg1); !strings.HasPrefix(d, descriptionPrefix) || len(d) != len(descriptionPrefix)+24 {
		t.Errorf("description %q", d)
	}
	st1.LoadBalancers[0].Pool = nil
	if cfg3, _ := h.render(st1); description(cfg3) == description(cfg1) {
		t.Error("two configurations with one description")
	}

	if err := writeFile(h.Config, cfg1); err != nil {
		t.Fatal(err)
	}
	back, cfg, err := h.Read()
	if err != nil || string(cfg) != string(cfg1) {
		t.Fatalf("Read: %v", err)
	}
	if !reflect.DeepEqual(back, st2) {
		t.Errorf("Read:\n got %+v\nwant %+v", back, st2)
	}

	if _, err := exec.LookPath("haproxy"); err != nil {
		t.Skip("no haproxy to check the configuration with")
	}
	if out, err := exec.Command("haproxy", "-c", "-f", h.Config).CombinedOutput(); err != nil {
		t.Errorf("haproxy -c: %v\n%s", err, out)
	}
}

// TestAddress: a load balancer keeps its address; a new one takes the
// address its Service's status shows when free, else the first free one.
func TestAddress(t *testing.T) {
	l := &LoadBalancers{pool: netip.MustParsePrefix("198.18.128.0/30")}
	svc := testService(corev1.ServiceExternalTrafficPolicyCluster)
	var st State
	st.put(LB{Name: "aother", Address: "198.18.128.1"})
	if a, err := l.address(st, svc); err != nil || a.String() != "198.18.128.2" {
		t.Errorf("new: %v %v, want 198.18.128.2", a, err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.18.128.3"}}
	if a, err := l.address(st, svc); err != nil || a.String() != "198.18.128.3" {
		t.Errorf("with a status: %v %v, want 198.18.128.3", a, err)
	}
	st.put(LB{Name: LoadBalancerName(svc), Address: "198.18.128.2"})
	if a, err := l.address(st, svc); err != nil || a.String() != "198.18.128.2" {
		t.Errorf("existing: %v %v, want 198.18.128.2", a, err)
	}
	st.put(LB{Name: "athird", Address: "198.18.128.3"})
	svc.UID = "new"
	if _, err := l.address(st, svc); err == nil {
		t.Error("an exhausted pool: no error")
	}
}
