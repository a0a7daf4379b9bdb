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
// As the chart runs them: every endpoint is a Pod and as many Pods are
// selected by no Service (-pods; both roles cache every Pod); each process
// runs in a memory cgroup at its chart container's default limit
// (-memory-limit, cgroup.go), the controller with the GOMEMLIMIT it would
// set itself there, and an OOM kill fails the run. After the restart the
// restarted process goes through endpoint churn and Service churn
// (-churn, churn.go). Each phase reports its time, the controller's
// memory, CPU seconds (cpu.go) and writes, and HAProxy's processes' PSS,
// CPU seconds and reloads. In the data-plane role it also reports what an
// unrelated rollout's readiness gate waits for while the replica builds
// (-gate-at, gatewait.go).
//
//	go run ./hack/procmem -n 5000 -endpoints 2 [-role data-plane]
//	make procmem PROCMEM_N=5000 PROCMEM_ROLE=data-plane
//
// The figures in charts/zerodrop/README.md and docs/scale.md come from it.
// It is not part of `make test`.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"zerodrop.dev/zerodrop/internal/bench"
	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/testutil"
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

// ns holds the Services and their Pods; releaseNS is the chart's release
// namespace, where the data-plane replicas' pods are (the control role
// lists them there), apart from the workloads as in a cluster.
const (
	ns        = "procmem"
	releaseNS = "procmem-system"
)

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
	if *churnFlag < 0 || *churnFlag > 1 {
		fmt.Fprintf(os.Stderr, "procmem: -churn %v: want 0 to 1\n", *churnFlag)
		os.Exit(2)
	}
	// Ctrl-C: the processes started are leaders of their own process
	// groups and do not get it; stop them, remove the cgroups.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "procmem: %v: stopping the processes, removing the memory cgroups\n", sig)
		runInterruptFuncs()
		os.Exit(130)
	}()
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
	removeCgroups, err := setupMemoryLimits(root)
	if err != nil {
		return err
	}
	// Registered first, run last: after every process in them has stopped.
	defer removeCgroups()
	fmt.Println(memoryLimitsLine())

	env, err := controlplane.Run()
	if err != nil {
		return err
	}
	stopEnv := sync.OnceFunc(func() { _ = env.Stop() })
	defer stopEnv()
	onInterrupt(stopEnv)
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
	for _, n := range []string{ns, releaseNS} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			return err
		}
	}
	start := time.Now()
	if err := testutil.Parallel(*services, podWorkers, func(i int) error { return createService(ctx, c, i, firstEndpoints(i)) }); err != nil {
		return err
	}
	if err := createUnselectedPods(ctx, c, *services**endpoints); err != nil {
		return err
	}
	if *podsFlag {
		fmt.Printf("created %d Services and EndpointSlices (%d endpoints), %d Pods (one per endpoint, as many selected by no Service) in %s\n",
			*services, *services**endpoints, 2**services**endpoints, time.Since(start).Round(time.Second))
	} else {
		fmt.Printf("created %d Services and EndpointSlices (%d endpoints), no Pods (-pods=false), in %s\n", *services, *services**endpoints, time.Since(start).Round(time.Second))
	}
	var eps *liveEndpoints
	if liveEndpointsHere() {
		if eps, err = listenEndpoints(*services * *endpoints); err != nil {
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
		if err := testutil.Parallel(*services, 8, func(i int) error { return setAddress(ctx, c, i) }); err != nil {
			return err
		}
		for k := 0; k < *refused; k++ {
			i := refusedService(k)
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
		stopHAProxy := sync.OnceFunc(func() {
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = haproxy.StopDir(sctx, hdir)
		})
		defer stopHAProxy()
		onInterrupt(stopHAProxy)
	}
	// What the churn phases and the gate-wait steps change.
	cl := newCluster(c, eps, held)
	args, urls, err := controllerArgs(hdir, kubeconfig, extra)
	if err != nil {
		return err
	}
	fmt.Printf("zerodrop %s\n", strings.Join(args, " "))
	metricsURL := urls.metrics

	// Build: every listener from nothing.
	var m meter
	m.prevHP = readHAProxy(hdir)
	m.start()
	started := time.Now()
	p, err := startController(bin, args, kubeconfig, filepath.Join(work, "build.log"))
	if err != nil {
		return err
	}
	// An unrelated rollout's step while the replica builds (gatewait.go).
	var building chan gateWait
	if *role == "data-plane" && *gateAt >= 0 && liveEndpointsHere() {
		building = make(chan gateWait, 1)
		go func() { building <- measureGateWait(ctx, cl, p, hdir, gateTarget(gateBuilding), started, *gateAt) }()
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
	m.row("build", took, p.read(metricsURL, hdir))
	reached := checkReach(started, held)
	time.Sleep(*idle)
	m.row("build, then idle "+idle.String(), 0, p.read(metricsURL, hdir))
	gates := ""
	if building != nil {
		// After the idle reading, which the built step's reload would
		// otherwise count.
		b := <-building
		if b.err != nil {
			p.stop()
			return fmt.Errorf("gate wait during the build: %w", b.err)
		}
		s := measureGateWait(ctx, cl, p, hdir, gateTarget(gateBuilt), time.Now(), 0)
		if s.err != nil {
			p.stop()
			return fmt.Errorf("gate wait once built: %w", s.err)
		}
		gates = gateLine(b, s, took)
		fmt.Println(gates)
	}
	p.stop()
	fmt.Printf("build: done after %s (%s)\n", took.Round(time.Second), map[bool]string{true: "the replica is ready: every load balancer reconciled once", false: "every Service has its address in its status"}[*role == "data-plane"])
	if *refused > 0 {
		log, _ := os.ReadFile(filepath.Join(work, "build.log"))
		fmt.Printf("build: %d group reloads refused, %d refused errors logged\n", strings.Count(string(log), "group reload rejected"), strings.Count(string(log), "refused by the load balancer"))
	}

	// Restart: a new process verifies every load balancer.
	m.newProcess()
	m.start()
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
	restarted := p.read(metricsURL, hdir)
	m.row("restart", rtook, restarted)
	rreached := checkReach(started, held)
	time.Sleep(*idle)
	m.row("restart, then idle "+idle.String(), 0, p.read(metricsURL, hdir))
	fmt.Printf("restart: every load balancer verified after %s\n", rtook.Round(time.Second))
	if d, ok := p.leadingAfter(started); ok {
		fmt.Printf("restart: leading, every cache synced, after %s (the rest: the first pass's reconciles)\n", d.Round(100*time.Millisecond))
	}
	if reached != "" {
		fmt.Printf("build: %s\nrestart: %s\n", reached, rreached)
	}
	if *churnFlag > 0 {
		if err := churnPhases(ctx, cl, p, &m, metricsURL, hdir); err != nil {
			p.stop()
			return err
		}
	}
	p.stop()
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
	fmt.Println(memoryLimitsLine())
	m.print()
	if gates != "" {
		fmt.Println(gates)
	}
	if n := m.oomKills(); n > 0 {
		return fmt.Errorf("%d OOM kills under the chart's memory limits (above)", n)
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

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
