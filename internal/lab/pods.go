package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"zerodrop.dev/zerodrop/internal/drain"
)

// Pod addresses: the API server refuses loopback addresses in EndpointSlices,
// so a pod publishes 198.18.x.y (RFC 2544 benchmarking space) and listens on
// 127.18.x.y; the controller runs with --backend-address-map
// 198.18.0.0/15=127.18.0.0/15.
const addressMap = "198.18.0.0/15=127.18.0.0/15"

// listenAddr maps a published pod address to the loopback address its
// server listens on; other addresses are returned unchanged.
func listenAddr(published netip.Addr) netip.Addr {
	if !published.Is4() {
		return published
	}
	b := published.As4()
	if b[0] == 198 && (b[1] == 18 || b[1] == 19) {
		b[0] = 127
	}
	return netip.AddrFrom4(b)
}

// podServer is a pod's process: one HTTP/1.1 server with keep-alive on the
// pod's loopback address, on every TCP container port. "/ws" is a WebSocket
// echo (wsEcho); "/" and any other path answer the pod's name to any method
// (a request body is read and dropped); the readiness probe's path answers
// the same.
type podServer struct {
	name    string
	srv     *http.Server
	lns     []net.Listener
	closing atomic.Bool // SIGTERM received: every answer says Connection: close

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	ws    map[*wsConn]struct{}
}

// netConnKey is the request context key of the request's connection, so a
// WebSocket (hijacked by the library) can still be reset by the kill.
type netConnKey struct{}

func startPodServer(name string, host netip.Addr, ports []int32) (*podServer, error) {
	s := &podServer{name: name, conns: map[net.Conn]struct{}{}, ws: map[*wsConn]struct{}{}}
	s.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/ws" {
				s.wsEcho(w, r)
				return
			}
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/plain")
			if s.closing.Load() {
				w.Header().Set("Connection", "close")
			}
			fmt.Fprintln(w, name)
		}),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, netConnKey{}, c)
		},
		ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(c net.Conn, st http.ConnState) {
			s.mu.Lock()
			defer s.mu.Unlock()
			switch st {
			case http.StateNew:
				s.conns[c] = struct{}{}
			case http.StateClosed, http.StateHijacked:
				delete(s.conns, c)
			}
		},
	}
	var lns []net.Listener
	for _, p := range ports {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(host, uint16(p)).String())
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, fmt.Errorf("pod %s: %w", name, err)
		}
		lns = append(lns, ln)
	}
	s.lns = lns
	for _, ln := range lns {
		go func() { _ = s.srv.Serve(ln) }()
	}
	return s, nil
}

// announceWait bounds how long a stopping pod waits for its keep-alive
// clients to take their Connection: close answer (several exchange periods).
const announceWait = 10 * longPeriod

// shutdown is the process's SIGTERM handling, as a well-behaved server does
// it: stop accepting, answer every request from now on with Connection:
// close so each keep-alive client ends its connection after a complete
// exchange, and after announceWait close what is still idle cleanly (FIN)
// and let in-flight requests finish. Closing idle keep-alive connections at
// once (what http.Server.Shutdown alone does) races a client that is just
// sending its next request: it reads EOF, a loss no load balancer causes.
// It returns when every connection is closed or ctx is done.
//
// Every WebSocket gets a close frame with status 1001 (going away) at once
// (goAway), the announcement a WebSocket client reconnects on.
func (s *podServer) shutdown(ctx context.Context) error {
	s.closing.Store(true)
	for _, ln := range s.lns {
		_ = ln.Close()
	}
	var wsDone sync.WaitGroup
	s.mu.Lock()
	for c := range s.ws {
		wsDone.Add(1)
		go func() { defer wsDone.Done(); c.goAway() }()
	}
	s.mu.Unlock()
	wait, cancel := context.WithTimeout(ctx, announceWait)
	defer cancel()
	for s.openConns() > 0 {
		if !sleepCtx(wait, 10*time.Millisecond) {
			break
		}
	}
	// The listeners are closed already: Shutdown closing them again (when
	// Serve has not returned yet) is no failure; it still waited for the
	// connections.
	if err := s.srv.Shutdown(ctx); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	done := make(chan struct{})
	go func() { wsDone.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *podServer) openConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// kill is SIGKILL: every connection is closed at once, with a reset.
func (s *podServer) kill() {
	s.mu.Lock()
	for c := range s.conns {
		resetConn(c)
	}
	for c := range s.ws {
		resetConn(c.nc)
	}
	s.mu.Unlock()
	_ = s.srv.Close()
}

func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// podRuntime runs one pod as a kubelet would: the process, its readiness
// probes, and on deletion preStop hooks, SIGTERM, the grace period and the
// final kill.
type podRuntime struct {
	key       string // namespace/name
	uid       types.UID
	node      string
	ip        netip.Addr // published pod IP
	listen    netip.Addr // where the server listens
	pod       *corev1.Pod
	server    *podServer
	startedAt time.Time
	notify    func() // the pod's status changed
	logf      func(format string, args ...any)

	cancel context.CancelFunc // probes and hooks

	mu          sync.Mutex
	ready       map[string]bool // container readiness from the probes
	terminating bool
	finishedAt  time.Time
	exitCode    int32
	done        chan struct{} // closed once the process is gone
}

func startPodRuntime(pod *corev1.Pod, ip netip.Addr, notify func(), logf func(string, ...any)) (*podRuntime, error) {
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
		ip: ip, listen: listenAddr(ip), pod: pod.DeepCopy(),
		notify: notify, logf: logf, ready: map[string]bool{}, done: make(chan struct{}),
	}
	srv, err := startPodServer(pod.Name, r.listen, ports)
	if err != nil {
		return nil, err
	}
	r.server, r.startedAt = srv, time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
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

// status is what the kubelet reports: container readiness and whether the
// process has ended (with its exit code).
func (r *podRuntime) status() (ready map[string]bool, finished time.Time, exitCode int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ready = map[string]bool{}
	for k, v := range r.ready {
		ready[k] = v && r.finishedAt.IsZero()
	}
	return ready, r.finishedAt, r.exitCode
}

func (r *podRuntime) setReady(container string, ready bool) {
	r.mu.Lock()
	changed := r.ready[container] != ready
	r.ready[container] = ready
	r.mu.Unlock()
	if changed {
		r.logf("pod %s container %s ready=%v", r.key, container, ready)
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
	success, failure := int(p.SuccessThreshold), int(p.FailureThreshold)
	if success <= 0 {
		success = 1
	}
	if failure <= 0 {
		failure = 3
	}
	if !sleepCtx(ctx, time.Duration(p.InitialDelaySeconds)*time.Second) {
		return
	}
	ok, bad := 0, 0
	for {
		if r.probe(ctx, c, p, timeout) {
			ok, bad = ok+1, 0
			if ok >= success {
				r.setReady(c.Name, true)
			}
		} else {
			ok, bad = 0, bad+1
			if bad >= failure {
				r.setReady(c.Name, false)
			}
		}
		if !sleepCtx(ctx, period) {
			return
		}
	}
}

func (r *podRuntime) probe(ctx context.Context, c *corev1.Container, p *corev1.Probe, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p.HTTPGet != nil:
		u, err := r.hookURL(c, p.HTTPGet)
		if err != nil {
			return false
		}
		code, err := httpGet(ctx, u)
		return err == nil && code >= 200 && code < 400
	case p.TCPSocket != nil:
		port, err := containerPort(c, p.TCPSocket.Port)
		if err != nil {
			return false
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(r.hostOf(p.TCPSocket.Host), uint16(port)).String())
		if err != nil {
			return false
		}
		conn.Close()
		return true
	default:
		// Exec and gRPC probes are not run: the container counts as ready.
		return true
	}
}

// hostOf resolves a probe's or hook's host: empty is the pod IP; a
// published lab address is mapped to its loopback address.
func (r *podRuntime) hostOf(host string) netip.Addr {
	if host == "" {
		return r.listen
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return listenAddr(a)
	}
	return r.listen
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
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := r.preStop(hookCtx, c)
				r.logf("pod %s container %s preStop: %s after %s", r.key, c.Name, res, time.Since(start).Round(time.Millisecond))
			}()
		}
		wg.Wait()
		cancel()
		// The kubelet gives the container at least 2 s after a preStop
		// hook that used up the grace period.
		remaining := max(time.Until(deadline), 2*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), remaining)
		err := r.server.shutdown(ctx)
		cancel()
		code := int32(0)
		if err != nil {
			r.server.kill()
			code = 137
		}
		r.logf("pod %s stopped (exit %d) %s after deletion", r.key, code, time.Since(start).Round(time.Millisecond))
		r.finish(code)
	}()
}

// kill ends the pod at once (the lab's teardown, or a pod that vanished).
func (r *podRuntime) kill() {
	r.server.kill()
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
	close(r.done)
	r.notify()
}

// preStop runs one container's preStop hook: sleep, exec `sleep N` (other
// commands are not run), or httpGet (the zerodrop drain hook among them).
func (r *podRuntime) preStop(ctx context.Context, c *corev1.Container) string {
	h := c.Lifecycle.PreStop
	switch {
	case h.Sleep != nil:
		sleepCtx(ctx, time.Duration(h.Sleep.Seconds)*time.Second)
		return fmt.Sprintf("slept %ds", h.Sleep.Seconds)
	case h.Exec != nil:
		if d, ok := sleepCommand(h.Exec.Command); ok {
			sleepCtx(ctx, d)
			return "exec sleep " + d.String()
		}
		return fmt.Sprintf("exec %q not run", h.Exec.Command)
	case h.HTTPGet != nil:
		u, err := r.hookURL(c, h.HTTPGet)
		if err != nil {
			return "httpGet: " + err.Error()
		}
		code, detail, err := httpGetDetail(ctx, u)
		if err != nil {
			return fmt.Sprintf("httpGet %s failed: %v", u, err)
		}
		return fmt.Sprintf("httpGet %s: %d %s", u, code, detail)
	}
	return "no action"
}

// sleepCommand recognises `sleep N` and `sh -c "sleep N"`.
func sleepCommand(cmd []string) (time.Duration, bool) {
	if len(cmd) == 3 && strings.HasSuffix(cmd[0], "sh") && cmd[1] == "-c" {
		cmd = strings.Fields(cmd[2])
	}
	if len(cmd) != 2 || !strings.HasSuffix(cmd[0], "sleep") {
		return 0, false
	}
	s := strings.TrimSuffix(cmd[1], "s")
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
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

var hookClient = &http.Client{
	Transport:     &http.Transport{DisableKeepAlives: true},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

func httpGet(ctx context.Context, u string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := hookClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// httpGetDetail is httpGet that also returns what the answer said: the
// drain endpoint's result header, or the first line of an error body.
func httpGetDetail(ctx context.Context, u string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := hookClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if r := resp.Header.Get(drain.ResultHeader); r != "" {
		return resp.StatusCode, r + ": " + line, nil
	}
	return resp.StatusCode, line, nil
}

func secondsOr(s int32, def int) time.Duration {
	if s <= 0 {
		return time.Duration(def) * time.Second
	}
	return time.Duration(s) * time.Second
}

// sleepCtx sleeps for d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
