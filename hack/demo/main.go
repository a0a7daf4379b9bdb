// Command demo runs zerodrop on a real control plane (kube-apiserver + etcd)
// and a real HAProxy: it creates a LoadBalancer Service backed by loopback
// servers, sends traffic through HAProxy, scales the endpoints, restarts the
// controller with nothing changed — first as zerodrop, then upstream-like
// (--sync=full) — and prints the provider writes of each restart.
//
// `make demo` runs it; `zerodrop lab` is the full measuring instrument.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/promtext"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

func main() {
	// The controller logs through klog; the demo prints its own story.
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

func run(ctx context.Context) error {
	step("starting kube-apiserver and etcd")
	env, err := controlplane.Run()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "zerodrop-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	defer stopHAProxy(dir)

	// Three loopback "pods"; the API server refuses loopback endpoints, so they
	// are published as 198.18.0.x and the controller maps them back.
	port, err := freePort()
	if err != nil {
		return err
	}
	for i := 1; i <= 3; i++ {
		name, addr := fmt.Sprintf("pod-%d", i), fmt.Sprintf("127.18.0.%d:%d", i, port)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintln(w, name)
		})}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: ptr.To("zerodrop.dev/haproxy"),
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 8000, TargetPort: intstr.FromInt(port), Protocol: corev1.ProtocolTCP}},
		},
	}
	if err := c.Create(ctx, svc); err != nil {
		return err
	}
	if err := setEndpoints(ctx, c, port, 1, 2); err != nil {
		return err
	}

	ctrl := startController(ctx, env, dir, "incremental")
	step("zerodrop controller started; waiting for the load balancer")
	lbAddr, err := waitIngress(ctx, c)
	if err != nil {
		return err
	}
	step("Service default/web has load balancer %s (HAProxy)", lbAddr)
	fmt.Printf("    6 requests through HAProxy: %s\n", strings.Join(requests(lbAddr, 6), " "))
	pids := workerPIDs(ctx, dir)
	step("scaling the endpoints to three")
	if err := setEndpoints(ctx, c, port, 1, 2, 3); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	fmt.Printf("    6 requests through HAProxy: %s\n", strings.Join(requests(lbAddr, 6), " "))
	fmt.Printf("    HAProxy workers before %v, after %v (no reload: servers change at run time)\n", pids, workerPIDs(ctx, dir))
	first := ctrl.stop()

	var rows [][2]string
	for _, mode := range []string{"incremental", "full"} {
		step("restarting the controller with --sync=%s, nothing changed", mode)
		r := startController(ctx, env, dir, mode)
		time.Sleep(4 * time.Second)
		writes := r.stop()
		rows = append(rows, [2]string{mode, fmt.Sprint(writes)})
	}
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "controller start\tHAProxy writes")
	fmt.Fprintf(w, "first start (creates the load balancer, scales it)\t%v\n", first)
	fmt.Fprintf(w, "restart, zerodrop (--sync=incremental)\t%s\n", rows[0][1])
	fmt.Fprintf(w, "restart, upstream-like (--sync=full)\t%s\n", rows[1][1])
	w.Flush()
	fmt.Println("\nmake bench measures the same at 1,000 Services; make test runs the invariants as tests.")
	return nil
}

type running struct {
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

func startController(ctx context.Context, env *controlplane.Env, dir, sync string) *running {
	reg := prometheus.NewRegistry()
	cctx, cancel := context.WithCancel(ctx)
	r := &running{reg: reg, cancel: cancel, done: make(chan error, 1)}
	// The shipped controller's defaults, but for the demo's cluster, its
	// HAProxy and a lease short enough for a restart within seconds.
	cfg := controller.DefaultConfig()
	cfg.RESTConfig, cfg.Registerer, cfg.HAProxy.Dir = env.Config, reg, dir
	cfg.Sync, cfg.Workers, cfg.ResyncPeriod = sync, 2, time.Hour
	cfg.AddressPool, cfg.AddressMap = "127.0.100.0/24", "198.18.0.0/15=127.18.0.0/15"
	cfg.MetricsAddr, cfg.ProbeAddr, cfg.DrainAddr = "0", "0", "127.0.0.1:0"
	cfg.LeaderID = "zerodrop-demo"
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 4*time.Second, 3*time.Second, 500*time.Millisecond
	go func() { r.done <- controller.RunConfig(cctx, cfg) }()
	return r
}

// stop stops the controller and returns the HAProxy writes it made.
func (r *running) stop() float64 {
	writes := 0.0
	if mfs, err := r.reg.Gather(); err == nil {
		writes, _ = promtext.Gathered(mfs).Sum("zerodrop_provider_writes_total")
	}
	r.cancel()
	<-r.done
	return writes
}

func setEndpoints(ctx context.Context, c client.Client, port int, pods ...int) error {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, p := range pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("198.18.0.%d", p)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	var cur discoveryv1.EndpointSlice
	if err := c.Get(ctx, client.ObjectKeyFromObject(s), &cur); err == nil {
		cur.Endpoints = s.Endpoints
		return c.Update(ctx, &cur)
	}
	return c.Create(ctx, s)
}

func waitIngress(ctx context.Context, c client.Client) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var svc corev1.Service
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "web"}, &svc); err == nil && len(svc.Status.LoadBalancer.Ingress) > 0 {
			addr := net.JoinHostPort(svc.Status.LoadBalancer.Ingress[0].IP, "8000")
			if len(requests(addr, 1)) == 1 && !strings.HasPrefix(requests(addr, 1)[0], "error") {
				return addr, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("no load balancer after 30 s")
}

func requests(addr string, n int) []string {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var out []string
	for i := 0; i < n; i++ {
		resp, err := hc.Get("http://" + addr + "/")
		if err != nil {
			out = append(out, "error")
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, strings.TrimSpace(string(b)))
	}
	return out
}

func workerPIDs(ctx context.Context, dir string) []int {
	p, err := haproxy.New(ctx, haproxy.Options{Dir: dir})
	if err != nil {
		return nil
	}
	_, w, _, _ := p.Procs(ctx)
	return w
}

func stopHAProxy(dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = haproxy.StopDir(ctx, dir)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
