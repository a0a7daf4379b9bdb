// Command procmem measures the memory of the real `zerodrop controller`
// process: the binary `go build ./cmd/zerodrop` makes (at -rev), started as
// its own process with its default flags plus what it needs here, against
// a real kube-apiserver + etcd (internal/controlplane) with -n LoadBalancer
// Services of -endpoints endpoints each. With -role all (the command's
// default) the process starts and owns a real HAProxy; with -role
// data-plane it attaches to the HAProxy that `zerodrop haproxy` runs, as the
// chart's DaemonSet does; with -role control it runs as the chart's
// Deployment, without any data-plane replica to read. It reports the
// process's peak RSS (VmHWM from /proc/PID/status, which covers the
// process's whole life) and RSS, and the Go heap from its own /metrics,
// after the build (every Service has its address in its status; a
// data-plane replica: ready, every load balancer reconciled once), after a
// restart (a new process has verified every load balancer) and after each
// has been idle for -idle. Every endpoint listens (-live): in the
// data-plane role a connection to every frontend must then reach an
// endpoint, after the build and after the restart, and the report says
// when the last one did, counted from the process's start.
//
//	go run ./hack/procmem -n 5000 -endpoints 2 [-role data-plane]
//
// The figures in charts/zerodrop/README.md and docs/scale.md come from it.
// It is not part of `make test`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"zerodrop.dev/zerodrop/internal/bench"
	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/promtext"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

var (
	services   = flag.Int("n", 500, "LoadBalancer Services")
	endpoints  = flag.Int("endpoints", 2, "endpoints per Service (each listens, see -live)")
	keep       = flag.Bool("keep", false, "keep the work directory (the processes' logs, HAProxy's state directory) and print where it is")
	live       = flag.Bool("live", true, "every endpoint listens at its own address and answers (one listener per endpoint, as one pod each), so HAProxy's checks pass, and after the build and after the restart a connection to every frontend must reach an endpoint; false: nothing listens (checks refused at once) and no frontend is tried")
	kubeFlag   = flag.Bool("kubeconfig-flag", false, "give the controller --kubeconfig (client-go's default client-side limit of 5 requests/s) instead of $KUBECONFIG (controller-runtime's GetConfig: no client-side limit, as in a pod)")
	goMemLimit = flag.String("gomemlimit", "", "GOMEMLIMIT in the controller's environment (empty: unset, as in a container without a memory limit)")
	idle       = flag.Duration("idle", 30*time.Second, "how long the process is left idle after the build and after the restart before the second reading")
	role       = flag.String("role", "all", "the controller's --role: all (the default: one process, which owns its HAProxy), data-plane (attached to an HAProxy run by `zerodrop haproxy`, as in the chart's DaemonSet; the Services' addresses written into their status first) or control (no HAProxy, no data-plane replica to read)")
	rev        = flag.String("rev", "HEAD", "the commit whose ./cmd/zerodrop is built and measured")
	timeout    = flag.Duration("timeout", 90*time.Minute, "give up after this long in one phase")
	refused    = flag.Int("refused", 0, "with -role data-plane: this many Services (spread over the n) have their port held by another process at their address (a plain listener), so HAProxy refuses them: the replica must be ready with them failing alone")
)

const ns = "procmem"

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./hack/procmem [flags] [-- extra zerodrop controller flags]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *services < 1 || *services**endpoints > 200*250 {
		fmt.Fprintf(os.Stderr, "procmem: -n %d × -endpoints %d: want 1 to 50,000 endpoints\n", *services, *endpoints)
		os.Exit(2)
	}
	if *role != "all" && *role != "data-plane" && *role != "control" {
		fmt.Fprintf(os.Stderr, "procmem: -role %q: want all, data-plane or control\n", *role)
		os.Exit(2)
	}
	if err := checkOldWorkerFlags(); err != nil {
		fmt.Fprintln(os.Stderr, "procmem:", err)
		os.Exit(2)
	}
	if err := run(flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "procmem:", err)
		os.Exit(1)
	}
}

func run(extra []string) error {
	ctx := context.Background()
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "zerodrop-procmem-")
	if err != nil {
		return err
	}
	defer func() {
		if *keep {
			fmt.Printf("work directory kept (logs of every process): %s\n", work)
			return
		}
		_ = os.RemoveAll(work)
	}()
	bin, commit, err := buildAt(root, *rev, work)
	if err != nil {
		return err
	}
	fmt.Printf("zerodrop built at commit %s\n", commit)
	if err := raiseFileLimit(); err != nil {
		return err
	}

	env, err := controlplane.Run()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	user, err := env.AddUser(envtest.User{Name: "procmem", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(work, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return err
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS = -1
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	start := time.Now()
	if err := parallel(*services, 8, func(i int) error {
		if err := c.Create(ctx, service(i)); err != nil {
			return err
		}
		return c.Create(ctx, slice(i))
	}); err != nil {
		return err
	}
	fmt.Printf("created %d Services and EndpointSlices (%d endpoints) in %s\n", *services, *services**endpoints, time.Since(start).Round(time.Second))
	if liveEndpointsHere() {
		eps, err := listenEndpoints(*services * *endpoints)
		if err != nil {
			return err
		}
		defer eps.close()
	}
	// The Services whose frontend HAProxy refuses (-refused): no connection
	// through them is tried.
	held := map[int]bool{}

	hdir := filepath.Join(work, "haproxy")
	var hp *process
	if *role == "data-plane" {
		// A replica serves each Service at the address the control role
		// wrote into its status: written here, as the control role writes
		// it, by no measured process.
		if err := parallel(*services, 8, func(i int) error { return setAddress(ctx, c, i) }); err != nil {
			return err
		}
		for k := 0; k < *refused; k++ {
			i := k * *services / *refused
			ln, err := net.Listen("tcp", net.JoinHostPort(address(i), "80"))
			if err != nil {
				return fmt.Errorf("-refused: hold Service %d's port: %w", i, err)
			}
			defer ln.Close()
			held[i] = true
		}
		// The replica's HAProxy, as the chart's haproxy container runs it.
		hp, err = startHAProxy(bin, hdir, filepath.Join(work, "haproxy.log"))
		if err != nil {
			return err
		}
		defer hp.stop()
	} else {
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = haproxy.StopDir(sctx, hdir)
		}()
	}
	args, urls, err := controllerArgs(hdir, kubeconfig, extra)
	if err != nil {
		return err
	}
	fmt.Printf("zerodrop %s\n", strings.Join(args, " "))
	metricsURL := urls.metrics

	// Build: every listener from nothing.
	started := time.Now()
	p, err := startController(bin, args, kubeconfig, filepath.Join(work, "build.log"))
	if err != nil {
		return err
	}
	var took time.Duration
	if *role == "data-plane" {
		took, err = awaitReady(p, urls.ready)
	} else {
		took, err = awaitBuilt(ctx, c, p, *services)
	}
	if err != nil {
		p.stop()
		return err
	}
	built := p.read(metricsURL)
	reached := checkReach(started, held)
	time.Sleep(*idle)
	builtIdle := p.read(metricsURL)
	p.stop()
	fmt.Printf("build: done after %s (%s)\n", took.Round(time.Second), map[bool]string{true: "the replica is ready: every load balancer reconciled once", false: "every Service has its address in its status"}[*role == "data-plane"])
	if *refused > 0 {
		log, _ := os.ReadFile(filepath.Join(work, "build.log"))
		fmt.Printf("build: %d group reloads refused, %d refused errors logged\n", strings.Count(string(log), "group reload rejected"), strings.Count(string(log), "refused by the load balancer"))
	}

	// Restart: a new process verifies every load balancer.
	started = time.Now()
	p, err = startController(bin, args, kubeconfig, filepath.Join(work, "restart.log"))
	if err != nil {
		return err
	}
	var rtook time.Duration
	if *role == "data-plane" {
		rtook, err = awaitReady(p, urls.ready)
	} else {
		rtook, err = awaitVerified(p, metricsURL, *services)
	}
	if err != nil {
		p.stop()
		return err
	}
	restarted := p.read(metricsURL)
	rreached := checkReach(started, held)
	time.Sleep(*idle)
	restartIdle := p.read(metricsURL)
	p.stop()
	fmt.Printf("restart: every load balancer verified after %s\n", rtook.Round(time.Second))
	if reached != "" {
		fmt.Printf("build: %s\nrestart: %s\n", reached, rreached)
	}
	if *role == "data-plane" {
		if err := hp.exited(); err != nil {
			return fmt.Errorf("HAProxy: %w", err)
		}
	}
	if *reloadsFlag > 0 {
		if err := oldWorkersPhase(ctx, c, bin, args, kubeconfig, work, hdir, urls.ready); err != nil {
			return fmt.Errorf("old workers: %w", err)
		}
	}

	fmt.Printf("\n%d Services, %d endpoints; the zerodrop controller process (--role=%s) at commit %s\n", *services, *services**endpoints, *role, commit)
	// The benches' line (bench.FlagsChanged): its flags against the
	// command's defaults, as this tree has them (-rev's may differ).
	if cc, err := controller.ParseArgs(args[1:]); err != nil {
		fmt.Printf("%s(not read: %v)\n", bench.FlagsLine, err)
	} else if *rev != "HEAD" {
		fmt.Printf("%s%s (defaults of the working tree, not of -rev %s)\n", bench.FlagsLine, bench.FlagsChanged(cc), *rev)
	} else {
		fmt.Println(bench.FlagsLine + bench.FlagsChanged(cc))
	}
	fmt.Println("| phase | peak RSS (VmHWM) | RSS | Go heap in use | Go memory from the OS | GOMEMLIMIT | provider writes (reloads) |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, r := range []struct {
		name string
		m    reading
	}{{"build", built}, {"build, then idle " + idle.String(), builtIdle}, {"restart", restarted}, {"restart, then idle " + idle.String(), restartIdle}} {
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s (%s) |\n", r.name, mib(r.m.hwm), mib(r.m.rss),
			mibF(r.m.metric("go_memstats_heap_inuse_bytes")), mibF(r.m.metric("go_memstats_sys_bytes")),
			limit(r.m.metric("go_gc_gomemlimit_bytes")),
			count(r.m.metric("zerodrop_provider_writes_total")), count(r.m.metric("zerodrop_provider_writes_total", "op", "reload")))
	}
	// With -refused the refused Services' retries are writes (reloads
	// HAProxy refuses again); without, a restart must write nothing.
	if w := restarted.metric("zerodrop_provider_writes_total"); w > 0 && *refused == 0 {
		return fmt.Errorf("the restart with nothing changed made %v provider writes, want 0", w)
	}
	if reachFailures > 0 {
		return fmt.Errorf("%d frontend connections never reached an endpoint (above)", reachFailures)
	}
	return nil
}

// buildAt builds ./cmd/zerodrop as committed at rev (a copy made with git
// archive, so that uncommitted changes in the working tree are not
// measured) into dir, and returns the binary and the commit's short hash.
func buildAt(root, rev, dir string) (string, string, error) {
	ctx := context.Background()
	out, err := supervisor.Output(ctx, supervisor.Command{Name: "git", Args: []string{"-C", root, "rev-parse", "--short", rev + "^{commit}"}})
	if err != nil {
		return "", "", fmt.Errorf("git rev-parse %s: %w", rev, err)
	}
	commit := strings.TrimSpace(string(out))
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", "", err
	}
	if err := supervisor.Run(ctx, supervisor.Command{Name: "sh", Args: []string{"-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", root, commit, src}}); err != nil {
		return "", "", fmt.Errorf("git archive %s: %w", commit, err)
	}
	bin := filepath.Join(dir, "zerodrop")
	if err := supervisor.Run(ctx, supervisor.Command{Name: "go", Args: []string{"build", "-o", bin, "./cmd/zerodrop"}, Dir: src}); err != nil {
		return "", "", fmt.Errorf("go build ./cmd/zerodrop at %s: %w", commit, err)
	}
	return bin, commit, nil
}

// controllerArgs are the command's default flags plus what this machine
// needs: a state directory of its own, an address pool with room for every
// Service (the default 127.0.100.0/24 holds 254), the endpoint addresses
// published on loopback (the API server refuses loopback endpoints), free
// loopback ports (the defaults may be taken), and what the role needs: the
// data-plane replica attaches to its HAProxy's sockets (as the chart's
// container does) and names a pod, the control role names the replicas'
// pods (here none: no replica is read).
func controllerArgs(hdir, kubeconfig string, extra []string) ([]string, urls, error) {
	var ports [4]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, urls{}, err
		}
		ports[i] = p
	}
	args := []string{"controller",
		"--address-pool=127.0.128.0/17",
		"--backend-address-map=198.18.0.0/15=127.18.0.0/15",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--drain-bind-address=127.0.0.1:%d", ports[2]),
	}
	switch *role {
	case "all":
		args = append(args, "--haproxy-dir="+hdir)
	case "data-plane":
		args = append(args, "--role=data-plane",
			"--haproxy-socket="+filepath.Join(hdir, "admin.sock"),
			"--haproxy-master-socket="+filepath.Join(hdir, "master.sock"),
			"--haproxy-config="+filepath.Join(hdir, "haproxy.cfg"),
			fmt.Sprintf("--state-bind-address=127.0.0.1:%d", ports[3]),
			"--pod-name=data-plane-0", "--pod-namespace="+ns, "--pod-uid=00000000-0000-0000-0000-000000000001")
	case "control":
		args = append(args, "--role=control", "--data-plane-namespace="+ns, "--data-plane-selector=app.kubernetes.io/name=zerodrop-data-plane")
	}
	if *kubeFlag {
		args = append(args, "--kubeconfig="+kubeconfig)
	}
	return append(args, extra...), urls{
		metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0]),
		ready:   fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]),
	}, nil
}

type urls struct{ metrics, ready string }

// startHAProxy runs `zerodrop haproxy --dir hdir`, the chart's haproxy
// container, and waits for its sockets.
func startHAProxy(bin, hdir, logFile string) (*process, error) {
	sp, err := supervisor.Start(supervisor.Spec{Name: bin, Args: []string{"haproxy", "--dir=" + hdir}, Log: logFile, Grace: stopGrace})
	if err != nil {
		return nil, err
	}
	p := &process{Process: sp, log: logFile}
	deadline := time.Now().Add(time.Minute)
	for {
		if err := p.exited(); err != nil {
			return nil, err
		}
		_, e1 := os.Stat(filepath.Join(hdir, "admin.sock"))
		_, e2 := os.Stat(filepath.Join(hdir, "master.sock"))
		if e1 == nil && e2 == nil {
			return p, nil
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, errors.New("HAProxy's sockets did not appear within a minute")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// setAddress writes Service i's frontend address into its status.
func setAddress(ctx context.Context, c client.Client, i int) error {
	var svc corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name(i)}, &svc); err != nil {
		return err
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: address(i), IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)}}
	return c.Status().Update(ctx, &svc)
}

// address is Service i's frontend address, in --address-pool.
func address(i int) string {
	a := 128<<8 + i + 1
	return fmt.Sprintf("127.0.%d.%d", a>>8, a&255)
}

// awaitReady waits until the process's /readyz answers 200: a data-plane
// replica has reconciled every load balancer once.
func awaitReady(p *process, readyURL string) (time.Duration, error) {
	start := time.Now()
	hc := &http.Client{Timeout: 10 * time.Second}
	for {
		if err := p.exited(); err != nil {
			return 0, err
		}
		if resp, err := hc.Get(readyURL); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start), nil
			}
		}
		if time.Since(start) > *timeout {
			return 0, fmt.Errorf("not ready after %s", *timeout)
		}
		time.Sleep(time.Second)
	}
}

// process is a zerodrop process the tool started, and its log.
type process struct {
	*supervisor.Process
	log string
}

// stopGrace bounds a process's stop: a controller with thousands of
// Services may take a while to end its work.
const stopGrace = 2 * time.Minute

func startController(bin string, args []string, kubeconfig, logFile string) (*process, error) {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMEMLIMIT=") && !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, "GOGC=") {
			env = append(env, kv)
		}
	}
	if !*kubeFlag {
		env = append(env, "KUBECONFIG="+kubeconfig)
	}
	if *goMemLimit != "" {
		env = append(env, "GOMEMLIMIT="+*goMemLimit)
	}
	sp, err := supervisor.Start(supervisor.Spec{Name: bin, Args: args, Env: env, Log: logFile, Grace: stopGrace})
	if err != nil {
		return nil, err
	}
	return &process{Process: sp, log: logFile}, nil
}

// exited reports the process's end, if it has ended, with its log's tail.
func (p *process) exited() error {
	if !p.Exited() {
		return nil
	}
	tail, _ := os.ReadFile(p.log)
	if len(tail) > 4000 {
		tail = tail[len(tail)-4000:]
	}
	return fmt.Errorf("the controller exited (%v):\n%s", p.Wait(), tail)
}

func (p *process) stop() { _ = p.Stop() }

// reading is the process's memory from the kernel and its own metrics.
type reading struct {
	hwm, rss uint64
	metrics  promtext.Metrics
}

func (p *process) read(metricsURL string) reading {
	var r reading
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid())); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			switch f[0] {
			case "VmHWM:":
				r.hwm = kb << 10
			case "VmRSS:":
				r.rss = kb << 10
			}
		}
	}
	r.metrics, _ = scrape(metricsURL)
	return r
}

// metric sums the samples of the metric name whose labels include the
// name, value pairs of labels; -1 when there is none (not scraped, or not
// exported by this build).
func (r reading) metric(name string, labels ...string) float64 {
	if v, found := r.metrics.Sum(name, labels...); found {
		return v
	}
	return -1
}

func scrape(url string) (promtext.Metrics, error) {
	return promtext.Fetch(context.Background(), &http.Client{Timeout: 10 * time.Second}, url)
}

// awaitBuilt waits until every Service has its load balancer address in its
// status (written after its load balancer was applied and verified).
func awaitBuilt(ctx context.Context, c client.Client, p *process, n int) (time.Duration, error) {
	start := time.Now()
	for {
		if err := p.exited(); err != nil {
			return 0, err
		}
		var list corev1.ServiceList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return 0, err
		}
		got := 0
		for _, s := range list.Items {
			if len(s.Status.LoadBalancer.Ingress) > 0 {
				got++
			}
		}
		if got >= n {
			return time.Since(start), nil
		}
		if time.Since(start) > *timeout {
			return 0, fmt.Errorf("only %d of %d Services have their address after %s", got, n, *timeout)
		}
		time.Sleep(5 * time.Second)
	}
}

// awaitVerified waits until the process has ended n reconciles
// (zerodrop_reconcile_total): a restart's verification of every load
// balancer.
func awaitVerified(p *process, metricsURL string, n int) (time.Duration, error) {
	start := time.Now()
	for {
		if err := p.exited(); err != nil {
			return 0, err
		}
		if m, err := scrape(metricsURL); err == nil {
			if got := (reading{metrics: m}).metric("zerodrop_reconcile_total"); got >= float64(n) {
				return time.Since(start), nil
			}
		}
		if time.Since(start) > *timeout {
			return 0, fmt.Errorf("not every load balancer verified after %s", *timeout)
		}
		time.Sleep(time.Second)
	}
}

func service(i int) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name(i),
			// Checks of endpoints that refuse every 10 s, not 2 s: the
			// checks are not what is measured.
			Annotations: map[string]string{model.AnnotationHealthCheckInterval: "10s"}},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: ptr.To("zerodrop.dev/haproxy"),
			// 5,000 Services do not fit the default node-port range.
			AllocateLoadBalancerNodePorts: ptr.To(false),
			Selector:                      map[string]string{"app": name(i)},
			Ports:                         []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
}

func slice(i int) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name(i), Labels: map[string]string{discoveryv1.LabelServiceName: name(i)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for j := 0; j < *endpoints; j++ {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{endpointIP(i**endpoints + j)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

func name(i int) string { return fmt.Sprintf("svc-%05d", i) }

// raiseFileLimit raises the open-file limit to the hard limit: the
// controller and the HAProxy it starts inherit it, and HAProxy needs a
// descriptor per listener and per checked server.
func raiseFileLimit() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if *role == "control" {
		// No HAProxy, and no endpoint listens (liveEndpointsHere).
		fmt.Printf("open-file limit %d\n", lim.Cur)
		return nil
	}
	need := uint64(*services * (*endpoints + 1))
	fmt.Printf("open-file limit %d; %d listeners and checked servers\n", lim.Cur, need)
	if need+1000 > lim.Cur && slices.Contains(flag.Args(), "--haproxy-no-strict-limits") {
		fmt.Printf("more than the limit: HAProxy starts with --haproxy-no-strict-limits (given after --), short of descriptors for some checks\n")
	} else if need+1000 > lim.Cur {
		return fmt.Errorf("%d listeners and checked servers need more descriptors than the limit %d (raise it, or give the controller --haproxy-no-strict-limits after --)", need, lim.Cur)
	}
	if own := uint64(*services * *endpoints); liveEndpointsHere() && own+1000 > lim.Cur {
		return fmt.Errorf("-live: %d endpoint listeners in this process need more descriptors than the limit %d (-live=false)", own, lim.Cur)
	}
	return nil
}

func parallel(n, workers int, f func(int) error) error {
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					errs <- fmt.Errorf("item %d: %w", i, err)
					return
				}
			}
		}()
	}
	for i := 0; i < n && len(errs) == 0; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	return errors.Join(<-errs)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func mib(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func mibF(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f MiB", v/(1<<20))
}

func limit(v float64) string {
	if v < 0 {
		return "n/a"
	}
	if v >= 1<<62 {
		return "none"
	}
	return mibF(v)
}

func count(v float64) string {
	if v < 0 {
		return "0"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
