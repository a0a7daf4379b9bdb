package cluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
)

// podRuntime runs one pod as a kubelet would, in the pod's own network
// namespace: the workload (a podServer in the lab process whose sockets live
// in that namespace, or, for zerodrop's controller pods, a real process
// started in it), its readiness probes, and on deletion preStop hooks,
// SIGTERM, the grace period and the final kill. Probes and hooks are sent
// from the node's namespace, as the kubelet sends them.
type podRuntime struct {
	key      string // namespace/name
	uid      types.UID
	node     string
	ip       netip.Addr
	pod      *corev1.Pod
	env      podEnv
	netPod   *netlab.Pod
	client   *http.Client       // probes and hooks, from the node's namespace
	server   *traffic.PodServer // a web pod
	sidecars []*netlab.Process  // a web pod's native sidecars (pods_sidecar.go)
	// exitOnSIGTERM: the web pod's app has no SIGTERM handling (exitsOnSIGTERM).
	exitOnSIGTERM bool
	proc          *netlab.Process
	containers    []*containerProc // a chart pod's (pods_containers.go)
	stopFwd       func()           // a process pod's API server forwarder
	startedAt     time.Time
	notify        func() // the pod's status changed
	logf          func(format string, args ...any)

	cancel context.CancelFunc // probes and hooks

	mu          sync.Mutex
	ready       map[string]bool // container readiness from the probes
	terminating bool
	crashed     bool // its node failed (crash)
	finishedAt  time.Time
	exitCode    int32
	done        chan struct{} // closed once the process is gone
}

// podEnv is what a pod's runtime needs from its node and the lab.
type podEnv struct {
	// dial connects from the node's namespace (probes and hooks).
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	lab       *netlab.Lab
	exe       string // the zerodrop binary of controller pods
	apiserver string // the API server's address in the root namespace
	logDir    string
	// hookDone, when set, learns each preStop hook's end: failed when it
	// could not run, or an httpGet failed, answered other than 2xx, or
	// answered the drain endpoint's "timeout".
	hookDone func(pod *corev1.Pod, failed bool)
	hostIP   string // the node's IP
	// host is set for a host-network pod: its namespace is the node's,
	// which the pod's end leaves alone.
	host bool
	// containers is how the chart's pods are run (pods_containers.go).
	containers *ContainerEnv
	// forwards, when set, are more root-namespace loopback addresses a
	// controller pod reaches (Agent.ControllerForwards).
	forwards func() []string
}

// controllerImage marks zerodrop's controller pods: the agent runs their
// container as `<zerodrop> <args…>` in the pod's namespace.
const ControllerImage = "lab/zerodrop:dev"

func startPodRuntime(pod *corev1.Pod, netPod *netlab.Pod, env podEnv, notify func(), logf func(string, ...any)) (*podRuntime, error) {
	var ports []int32
	seen := map[int32]bool{}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) && !seen[p.ContainerPort] {
				seen[p.ContainerPort] = true
				ports = append(ports, p.ContainerPort)
			}
		}
	}
	r := &podRuntime{
		key: pod.Namespace + "/" + pod.Name, uid: pod.UID, node: pod.Spec.NodeName,
		ip: netPod.IP, pod: pod.DeepCopy(), env: env, netPod: netPod,
		client: &http.Client{
			Transport:     &http.Transport{DisableKeepAlives: true, DialContext: env.dial},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		notify: notify, logf: logf, ready: map[string]bool{}, done: make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.startedAt = time.Now()
	if env.containers != nil && chartPod(pod) {
		if err := r.startContainers(ctx); err != nil {
			r.stopContainers(0)
			if r.stopFwd != nil {
				r.stopFwd()
			}
			cancel()
			return nil, err
		}
	} else if env.host {
		cancel()
		return nil, fmt.Errorf("a data-plane node runs zerodrop's images only")
	} else if len(pod.Spec.Containers) == 1 && pod.Spec.Containers[0].Image == ControllerImage {
		if err := r.startProcess(&r.pod.Spec.Containers[0]); err != nil {
			cancel()
			return nil, err
		}
	} else {
		if err := r.startSidecars(); err != nil {
			cancel()
			return nil, err
		}
		srv, err := traffic.StartPodServer(pod.Name, netPod.Listen, r.ip, ports)
		if err != nil {
			r.stopSidecars(0)
			cancel()
			return nil, err
		}
		r.server = srv
		r.exitOnSIGTERM = traffic.ExitsOnSIGTERM(pod)
	}
	for i := range r.pod.Spec.Containers {
		c := &r.pod.Spec.Containers[i]
		if c.ReadinessProbe == nil {
			r.ready[c.Name] = true
			continue
		}
		go r.probeLoop(ctx, c)
	}
	return r, nil
}

// startProcess runs a controller pod's container: its args with the
// container's literal environment, in the pod's namespace, with a forwarder
// to the API server on the namespace's loopback (its kubeconfig names it).
// When the process exits, the pod has finished.
func (r *podRuntime) startProcess(c *corev1.Container) error {
	forwards := [][2]string{{APIServerInNetns, r.env.apiserver}} // listen, target
	if r.env.forwards != nil {
		for _, addr := range r.env.forwards() {
			forwards = append(forwards, [2]string{addr, addr})
		}
	}
	var stops []func()
	r.stopFwd = func() {
		for _, stop := range stops {
			stop()
		}
	}
	for _, f := range forwards {
		stop, err := r.env.lab.Forward(r.netPod.Netns, f[0], f[1])
		if err != nil {
			r.stopFwd()
			return err
		}
		stops = append(stops, stop)
	}
	p, err := r.startContainerProcess(c, "controller", r.pod.Namespace+"_"+r.pod.Name+".log")
	if err != nil {
		r.stopFwd()
		return err
	}
	r.proc = p
	go func() {
		<-p.Done()
		r.finish(p.ExitCode())
	}()
	return nil
}

// status is what the kubelet reports: container readiness and whether the
// process has ended (with its exit code).
func (r *podRuntime) status() (ready map[string]bool, finished time.Time, exitCode int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ready = map[string]bool{}
	for k, v := range r.ready {
		ready[k] = v && r.finishedAt.IsZero()
	}
	for _, cp := range r.containers {
		if cp.proc.Exited() {
			ready[cp.c.Name] = false
		}
	}
	return ready, r.finishedAt, r.exitCode
}

// setReady records container's readiness; why, when set, is the failed
// probe's detail, logged with a change.
func (r *podRuntime) setReady(container string, ready bool, why string) {
	r.mu.Lock()
	changed := r.ready[container] != ready
	r.ready[container] = ready
	r.mu.Unlock()
	if changed {
		if why != "" {
			r.logf("pod %s container %s ready=%v (probe: %s)", r.key, container, ready, why)
		} else {
			r.logf("pod %s container %s ready=%v", r.key, container, ready)
		}
		r.notify()
	}
}

// probeLoop runs a readiness probe with the kubelet's semantics:
// initialDelaySeconds, then every periodSeconds; successThreshold
// successes make the container ready, failureThreshold failures unready.
// The kubelet keeps probing while the pod terminates.
func (r *podRuntime) probeLoop(ctx context.Context, c *corev1.Container) {
	p := c.ReadinessProbe
	period := secondsOr(p.PeriodSeconds, 10)
	timeout := secondsOr(p.TimeoutSeconds, 1)
	success, failure := max(int(p.SuccessThreshold), 1), int(p.FailureThreshold)
	if failure <= 0 {
		failure = 3
	}
	if !traffic.SleepCtx(ctx, time.Duration(p.InitialDelaySeconds)*time.Second) {
		return
	}
	ok, bad := 0, 0
	for {
		if passed, detail := r.probe(ctx, c, p, timeout); passed {
			ok, bad = ok+1, 0
			if ok >= success {
				r.setReady(c.Name, true, "")
			}
		} else {
			ok, bad = 0, bad+1
			if bad >= failure {
				r.setReady(c.Name, false, detail)
			}
		}
		if !traffic.SleepCtx(ctx, period) {
			return
		}
	}
}

// probe runs one probe and says whether it passed, and if not why.
func (r *podRuntime) probe(ctx context.Context, c *corev1.Container, p *corev1.Probe, timeout time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p.HTTPGet != nil:
		u, err := r.hookURL(c, p.HTTPGet)
		if err != nil {
			return false, err.Error()
		}
		code, detail, err := httpGetDetail(ctx, r.client, u, p.HTTPGet.HTTPHeaders)
		if err != nil {
			return false, err.Error()
		}
		return code >= 200 && code < 400, fmt.Sprintf("%d %s", code, detail)
	case p.TCPSocket != nil:
		port, err := containerPort(c, p.TCPSocket.Port)
		if err != nil {
			return false, err.Error()
		}
		conn, err := r.env.dial(ctx, "tcp", netip.AddrPortFrom(r.hostOf(p.TCPSocket.Host), uint16(port)).String())
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	case p.Exec != nil:
		return r.execProbe(ctx, c, p.Exec.Command)
	default:
		// gRPC probes are not run: the container counts as ready.
		return true, ""
	}
}

// hostOf resolves a probe's or hook's host: empty (or a name, which the lab
// does not resolve) is the pod IP.
func (r *podRuntime) hostOf(host string) netip.Addr {
	if a, err := netip.ParseAddr(host); err == nil {
		return a
	}
	return r.ip
}

// hookURL builds the URL of an httpGet probe or hook as the kubelet does:
// the path may carry a query.
func (r *podRuntime) hookURL(c *corev1.Container, h *corev1.HTTPGetAction) (string, error) {
	port, err := containerPort(c, h.Port)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(h.Path)
	if err != nil {
		return "", err
	}
	u.Scheme = "http"
	u.Host = netip.AddrPortFrom(r.hostOf(h.Host), uint16(port)).String()
	return u.String(), nil
}

// terminate runs the kubelet's container stop with the given grace period:
// every container's preStop hook (in parallel), then SIGTERM (graceful
// shutdown), and at the end of the grace period the kill. A preStop hook
// that fails is logged and the stop goes on, as the kubelet does.
func (r *podRuntime) terminate(grace time.Duration) {
	r.mu.Lock()
	if r.terminating {
		r.mu.Unlock()
		return
	}
	r.terminating = true
	r.mu.Unlock()
	go func() {
		start := time.Now()
		deadline := start.Add(grace)
		hookCtx, cancel := context.WithDeadline(context.Background(), deadline)
		var wg sync.WaitGroup
		for i := range r.pod.Spec.Containers {
			c := &r.pod.Spec.Containers[i]
			if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
				continue
			}
			wg.Go(func() {
				res, failed := r.preStop(hookCtx, c)
				r.logf("pod %s container %s preStop: %s after %s", r.key, c.Name, res, time.Since(start).Round(time.Millisecond))
				if r.env.hookDone != nil {
					r.env.hookDone(r.pod, failed)
				}
			})
		}
		wg.Wait()
		cancel()
		// The kubelet gives the container at least 2 s after a preStop
		// hook that used up the grace period.
		code := r.stopWorkload(max(time.Until(deadline), 2*time.Second))
		r.logf("pod %s stopped (exit %d) %s after deletion", r.key, code, time.Since(start).Round(time.Millisecond))
		// A web pod's sidecars last, with what is left of the grace period
		// (the kubelet's minimum of 2 s).
		r.stopSidecars(max(time.Until(deadline), 2*time.Second))
		r.finish(code) // a controller pod's process has finished it already
	}()
}

// stopWorkload stops what the pod runs — a chart pod's containers, a
// controller pod's process, or a web pod's app — with SIGTERM and grace
// before the kill, and returns its exit code.
func (r *podRuntime) stopWorkload(grace time.Duration) int32 {
	switch {
	case len(r.containers) > 0:
		return r.stopContainers(grace)
	case r.proc != nil:
		r.proc.Signal(syscall.SIGTERM)
		select {
		case <-r.proc.Done():
		case <-time.After(grace):
			r.proc.Signal(syscall.SIGKILL)
		}
		<-r.done
		return r.exitCode
	case r.exitOnSIGTERM:
		r.logf("pod %s: its app has no SIGTERM handling: it exits at once", r.key)
		r.server.Exit()
		return 143
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := r.server.Shutdown(ctx); err != nil {
		r.server.Kill()
		return 137
	}
	return 0
}

// kill ends the pod at once (the lab's teardown, or a pod that vanished).
func (r *podRuntime) kill() {
	if len(r.containers) > 0 {
		r.mu.Lock()
		r.terminating = true
		r.mu.Unlock()
		r.finish(r.stopContainers(0))
		return
	}
	if r.proc != nil {
		r.proc.Signal(syscall.SIGKILL)
		<-r.done
		return
	}
	r.server.Kill()
	r.stopSidecars(0)
	r.finish(137)
}

func (r *podRuntime) finish(code int32) {
	r.mu.Lock()
	if !r.finishedAt.IsZero() {
		r.mu.Unlock()
		return
	}
	r.finishedAt, r.exitCode = time.Now(), code
	r.mu.Unlock()
	r.cancel()
	// The pod's sandbox goes with its last container: the forwarder, then
	// the namespace (and both ends of its veth).
	if r.stopFwd != nil {
		r.stopFwd()
	}
	if !r.env.host {
		if err := r.netPod.Close(); err != nil {
			r.logf("pod %s: remove its namespace: %v", r.key, err)
		}
	}
	if len(r.containers) > 0 {
		if f := r.env.containers.AfterStop; f != nil {
			f(r.pod)
		}
		// Its emptyDir volumes and token go with the pod.
		if err := os.RemoveAll(r.podDir()); err != nil {
			r.logf("pod %s: remove its directory: %v", r.key, err)
		}
	}
	close(r.done)
	r.notify()
}

func containerPort(c *corev1.Container, port intstr.IntOrString) (int32, error) {
	if port.Type == intstr.Int {
		return port.IntVal, nil
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return p.ContainerPort, nil
		}
	}
	return 0, fmt.Errorf("container %s has no port named %q", c.Name, port.StrVal)
}

func secondsOr(s int32, def int) time.Duration {
	if s <= 0 {
		return time.Duration(def) * time.Second
	}
	return time.Duration(s) * time.Second
}
