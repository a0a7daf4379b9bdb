package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/promtext"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// The measured processes: building the binary, its flags, starting and
// stopping it, and reading its memory and metrics.

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
			"--haproxy-validate-socket="+filepath.Join(hdir, "validate.sock"),
			fmt.Sprintf("--state-bind-address=127.0.0.1:%d", ports[3]),
			"--pod-name=data-plane-0", "--pod-namespace="+releaseNS, "--pod-uid=00000000-0000-0000-0000-000000000001")
		// The chart passes the haproxy container's limit, which bounds the
		// old workers; here with the limit that container has (-memory-limit).
		if haproxyCgroup != nil && !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--haproxy-memory-limit") }) {
			args = append(args, fmt.Sprintf("--haproxy-memory-limit=%d", haproxyCgroup.limit))
		}
	case "control":
		args = append(args, "--role=control", "--data-plane-namespace="+releaseNS, "--data-plane-selector=app.kubernetes.io/name=zerodrop-data-plane")
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
	name, args := haproxyCgroup.wrap(bin, []string{"haproxy", "--dir=" + hdir})
	sp, err := supervisor.Start(supervisor.Spec{Name: name, Args: args, Log: logFile, Grace: stopGrace})
	if err != nil {
		return nil, err
	}
	p := &process{Process: sp, log: logFile, cg: haproxyCgroup}
	onInterrupt(p.stop)
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
	// cg is the memory cgroup it runs in (nil: none).
	cg *memCgroup
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
	if v := controllerGoMemLimit(); v != "" {
		env = append(env, "GOMEMLIMIT="+v)
	}
	name, args := controllerCgroup.wrap(bin, args)
	sp, err := supervisor.Start(supervisor.Spec{Name: name, Args: args, Env: env, Log: logFile, Grace: stopGrace})
	if err != nil {
		return nil, err
	}
	p := &process{Process: sp, log: logFile, cg: controllerCgroup}
	onInterrupt(p.stop)
	return p, nil
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
	oom := ""
	if p.cg != nil {
		if n, err := p.cg.oomKills(); err == nil && n > 0 {
			oom = fmt.Sprintf("; %d OOM kills in its memory cgroup so far (limit %s)", n, mib(uint64(p.cg.limit)))
		}
	}
	return fmt.Errorf("the process exited (%v%s):\n%s", p.Wait(), oom, tail)
}

func (p *process) stop() { _ = p.Stop() }

// reading is the process's memory and CPU seconds from the kernel and its
// own metrics, and HAProxy's processes (hp; not ok without one).
type reading struct {
	hwm, rss uint64
	cpu      float64
	metrics  promtext.Metrics
	hp       haproxyReading
}

// read reads the controller process and the HAProxy of hdir.
func (p *process) read(metricsURL, hdir string) reading {
	r := reading{cpu: procCPU(p.Pid(), false), hp: readHAProxy(hdir)}
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

// leadingAfter is how long after started the process logged that it
// leads with its caches synced (service.Controller.Start's line; klog's
// text header, the command's default --log-format): the part of a phase
// spent before the first reconcile. False when the line is not found.
func (p *process) leadingAfter(started time.Time) (time.Duration, bool) {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, `"leading: reconciling load balancers"`) {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || len(f[0]) != 5 {
			return 0, false
		}
		t, err := time.ParseInLocation("0102 15:04:05.000000", f[0][1:]+" "+f[1], time.Local)
		if err != nil {
			return 0, false
		}
		t = t.AddDate(started.Year(), 0, 0)
		if d := t.Sub(started); d >= 0 {
			return d, true
		}
		return 0, false
	}
	return 0, false
}

// apiWrites sums the process's requests to the apiserver that write
// (client-go's rest_client_requests_total by method); -1 when not scraped.
func (r reading) apiWrites() float64 {
	total, found := 0.0, false
	for _, method := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		if v, ok := r.metrics.Sum("rest_client_requests_total", "method", method); ok {
			total, found = total+v, true
		}
	}
	if !found && r.metric("rest_client_requests_total") < 0 {
		return -1
	}
	return total
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
