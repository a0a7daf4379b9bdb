package lab

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/lab/sockcount"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// An HAProxy data plane of replicas (--data-plane-replicas N, zerodrop
// mode): the arrangement the chart's provider=haproxy installs, made by the
// lab. Replica i runs on load-balancer host lbs[i] (its own network
// namespace, every frontend address local, as on a data-plane node): an
// HAProxy the lab starts there (standing for the pod's haproxy container,
// with the lab's counting proxies at its sockets) and the replica's own
// `zerodrop controller --role=data-plane` process attached to it, the only
// writer of that HAProxy. A Pod object in zerodrop-system, bound to no lab
// node (the lab's kubelet leaves it alone) and given the host's address as
// its IP by the lab, is how the control role finds the replica. The
// controller pods run with --role=control. The client reaches the replicas
// through a resilient nexthop group hashed on the 5-tuple (network.routeTo).
const (
	// labelDataPlane marks a run's data-plane replica Pods (value: run id).
	labelDataPlane = "lab.zerodrop.dev/data-plane"
	// statePort is the replicas' state endpoint (the chart's default).
	statePort = 9092
)

// dpReplica is one data-plane replica of a run.
type dpReplica struct {
	index int
	gen   int // 1 for the first pod of this replica, +1 per replacement
	host  *netlab.Host
	dir   string
	prov  *haproxy.Provider // the lab's view of the replica's HAProxy
	socks []*sockcount.Proxy

	mu   sync.Mutex
	proc *netlab.Process // the replica's zerodrop process
	runs int             // processes started, for scrape keys and logs
}

func (d *dpReplica) pod(runID int) string {
	return fmt.Sprintf("data-plane-%d-%d-%d", runID, d.index, d.gen)
}

func (d *dpReplica) process() *netlab.Process {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.proc
}

// landed is the writes counted at this replica's HAProxy sockets.
func (d *dpReplica) landed() int64 {
	var n int64
	for _, p := range d.socks {
		n += int64(p.Counts().Writes)
	}
	return n
}

// dataPlaneEnabled: the run has a data plane of replicas.
func (r *run) dataPlaneEnabled() bool {
	return r.mode == ModeZerodrop && r.lab.opts.DataPlaneReplicas >= 2
}

// replicas are the run's data-plane replicas now.
func (r *run) replicas() []*dpReplica {
	r.dpMu.Lock()
	defer r.dpMu.Unlock()
	return slices.Clone(r.dataPlane)
}

// setReplica makes d replica d.index of the run (appended when new).
func (r *run) setReplica(d *dpReplica) {
	r.dpMu.Lock()
	defer r.dpMu.Unlock()
	for i, o := range r.dataPlane {
		if o.index == d.index {
			r.dataPlane[i] = d
			return
		}
	}
	r.dataPlane = append(r.dataPlane, d)
}

// dropReplica takes d out of the run's replicas (a hard failure).
func (r *run) dropReplica(d *dpReplica) {
	r.dpMu.Lock()
	defer r.dpMu.Unlock()
	r.dataPlane = slices.DeleteFunc(r.dataPlane, func(o *dpReplica) bool { return o == d })
}

// startDataPlane starts every replica and routes the client to them all.
func (r *run) startDataPlane(ctx context.Context) error {
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return err
	}
	var members []int
	for i := 0; i < r.lab.opts.DataPlaneReplicas; i++ {
		d := &dpReplica{index: i, gen: 1, host: r.lab.net.lbs[i]}
		err := r.startReplica(ctx, d)
		// Published also when it failed: the teardown stops what started.
		r.setReplica(d)
		if err != nil {
			return fmt.Errorf("data-plane replica %d: %w", i, err)
		}
		members = append(members, i)
	}
	r.prov = r.replicas()[0].prov
	return r.lab.net.routeTo(ctx, true, members...)
}

// startReplica starts a replica's HAProxy (from an empty state directory,
// as a new pod's emptyDir), its zerodrop process, and its Pod object.
func (r *run) startReplica(ctx context.Context, d *dpReplica) error {
	d.dir = filepath.Join(r.dir, fmt.Sprintf("replica-%d-%d", d.index, d.gen))
	wrapper := d.dir + ".sh"
	if err := writeHAProxyWrapper(wrapper, d.host.Name); err != nil {
		return err
	}
	prov, socks, err := startHAProxy(ctx, d.dir, wrapper)
	d.socks = socks
	r.dpMu.Lock()
	r.socks = append(r.socks, socks...)
	r.dpMu.Unlock()
	if err != nil {
		return err
	}
	d.prov = prov
	if err := r.startReplicaProcess(ctx, d); err != nil {
		return err
	}
	return r.replicaPod(ctx, d)
}

// replicaArgs are the replica's zerodrop process's: the chart's data-plane
// container's flags, with the run's class and the lab's kubeconfig.
func (r *run) replicaArgs(d *dpReplica) []string {
	return []string{
		"controller",
		"--kubeconfig=" + r.lab.net.kubeconfig,
		"--load-balancer-class=" + r.class,
		"--role=data-plane",
		"--haproxy-socket=" + filepath.Join(d.dir, "admin.sock"),
		"--haproxy-master-socket=" + filepath.Join(d.dir, "master.sock"),
		"--haproxy-config=" + filepath.Join(d.dir, "haproxy.cfg"),
		"--haproxy-binary=" + d.dir + ".sh",
		fmt.Sprintf("--state-bind-address=:%d", statePort),
		fmt.Sprintf("--metrics-bind-address=:%d", metricsPort),
		fmt.Sprintf("--health-probe-bind-address=:%d", probesPort),
	}
}

// startReplicaProcess starts the replica's zerodrop process in its host's
// namespace and waits until it is ready (its HAProxy answers).
func (r *run) startReplicaProcess(ctx context.Context, d *dpReplica) error {
	d.mu.Lock()
	d.runs++
	n := d.runs
	d.mu.Unlock()
	logPath := filepath.Join(r.lab.dir, fmt.Sprintf("data-plane-%d-%d-%d-%d.log", r.id, d.index, d.gen, n))
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	// env(1) sets ChildEnv (for a test binary's TestMain) and execs: the
	// process keeps its PID, and its signals are the replica's.
	args := append([]string{ChildEnv + "=controller", r.lab.opts.Executable}, r.replicaArgs(d)...)
	p, err := r.lab.net.net.Start(d.host.Netns, f, f, "env", args...)
	f.Close()
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.proc = p
	d.mu.Unlock()
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: r.lab.net.admin.DialContext}}
	url := fmt.Sprintf("http://%s:%d/readyz", d.host.IP, probesPort)
	return waitFor(ctx, 60*time.Second, fmt.Sprintf("data-plane replica %d's zerodrop process ready", d.index), func() (bool, string) {
		select {
		case <-p.Done():
			return false, "exited (log " + logPath + ")"
		default:
		}
		if err := get(client, url); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// replicaPod is the replica's Pod object, as its DaemonSet pod would be
// reported: running, with its host's address (host network).
func (r *run) replicaPod(ctx context.Context, d *dpReplica) error {
	pods := r.lab.cp.client.CoreV1().Pods(ctrlNamespace)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: d.pod(r.id), Namespace: ctrlNamespace,
			Labels: map[string]string{labelDataPlane: strconv.Itoa(r.id)}},
		Spec: corev1.PodSpec{
			// No lab node: the lab's kubelet runs nothing for it.
			NodeName:    fmt.Sprintf("lab-lb-%d", d.index+1),
			HostNetwork: true,
			Containers: []corev1.Container{{Name: "haproxy", Image: dataPlaneImage},
				{Name: "controller", Image: dataPlaneImage}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("data-plane pod %s: %w", pod.Name, err)
	}
	ip := d.host.IP.String()
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		HostIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if _, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("data-plane pod %s status: %w", pod.Name, err)
	}
	return nil
}

// dataPlaneImage names the data-plane pods' image (the chart's).
const dataPlaneImage = "lab/zerodrop-dataplane:dev"

// stopReplica ends a replica: its zerodrop process, its HAProxy, its Pod.
func (r *run) stopReplica(ctx context.Context, d *dpReplica) error {
	var errs []error
	if p := d.process(); p != nil {
		_ = p.Stop()
	}
	if d.prov != nil {
		errs = append(errs, d.prov.Close())
		if n := killByArg(filepath.Join(d.dir, "haproxy.cfg")); n > 0 {
			r.lab.logf("%s: killed %d HAProxy processes of replica %d left after the master stopped", r.name(), n, d.index)
		}
	}
	err := r.lab.cp.client.CoreV1().Pods(ctrlNamespace).Delete(ctx, d.pod(r.id), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// stopDataPlane ends every replica and routes the client to the first load
// balancer only, as runs without a data plane of replicas expect.
func (r *run) stopDataPlane() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reps := r.replicas()
	for _, d := range reps {
		if err := r.stopReplica(ctx, d); err != nil {
			r.lab.logf("%s: stop data-plane replica %d: %v", r.name(), d.index, err)
		}
	}
	if r.dataPlaneEnabled() {
		if err := r.lab.net.routeTo(ctx, true, 0); err != nil {
			r.lab.logf("%s: route to the first load balancer: %v", r.name(), err)
		}
	}
}

// dataPlaneControlArgs are the control role's flags for the run's replicas.
func (r *run) dataPlaneControlArgs() []string {
	return []string{
		"--role=control",
		"--data-plane-namespace=" + ctrlNamespace,
		"--data-plane-selector=" + labelDataPlane + "=" + strconv.Itoa(r.id),
		fmt.Sprintf("--data-plane-state-port=%d", statePort),
	}
}

// scrapeDataPlane reads every running replica process's metrics (writes
// and conflicts it reports itself), keyed by process.
func (cs *controllers) scrapeDataPlane() {
	for _, d := range cs.run.replicas() {
		d.mu.Lock()
		p, n := d.proc, d.runs
		d.mu.Unlock()
		if p == nil {
			continue
		}
		select {
		case <-p.Done():
			continue
		default:
		}
		name := fmt.Sprintf("%s/%d", d.pod(cs.run.id), n)
		cs.scrapeAt(types.UID("process:"+name), name, d.host.IP.String())
	}
}

// scenarioLBReplicaRestart is issue 17's data-plane scenario.
const scenarioLBReplicaRestart = "lb-replica-restart"

// withdrawSettle is how long the lab waits between withdrawing a replica's
// route and stopping it: a router's convergence is not instant either, and
// a connection being opened through the replica at the withdrawal completes.
const withdrawSettle = time.Second

// ReplicaFigures are lb-replica-restart's figures by phase: the requests
// that failed (late ones included) and the long connections that broke from
// the phase's start until the workload was steady after it (no failure for
// 5 s: a failure is counted when its request ends).
type ReplicaFigures struct {
	RestartFailed int64 `json:"process_restarts_failed_requests"`
	RestartBroken int64 `json:"process_restarts_broken_long_conns"`
	ReplaceFailed int64 `json:"replacement_failed_requests"`
	ReplaceBroken int64 `json:"replacement_broken_long_conns"`
	HardFailed    int64 `json:"hard_failure_failed_requests"`
	HardBroken    int64 `json:"hard_failure_broken_long_conns"`
	// HardDetectSeconds is how long the killed replica's route stayed
	// announced (hardDetect).
	HardDetectSeconds float64 `json:"hard_failure_detect_seconds"`
}

// hardDetect is how long a hard-failed replica's route stays announced: as
// BFD with a 1 s interval and a multiplier of 3 would take to withdraw it.
const hardDetect = 3 * time.Second

// actLBReplicaRestart: nothing changes in the workload while the data plane
// is disrupted three times; the figures of each phase are in
// ReplicaFigures. (1) Replica 0's zerodrop process is restarted, SIGKILL and
// then SIGTERM, as a crash or an upgrade of its container does, while its
// HAProxy serves on: each restart's writes counted at that HAProxy's sockets
// go to writes_per_restart (nothing changed: 0 expected). (2) Replica 1 is
// replaced as a DaemonSet update replaces its pod: its route is withdrawn
// (its flows move to the other replica, which has no state for the
// established ones), it is stopped and its Pod deleted; a new replica starts
// from an empty state directory, builds its HAProxy from the Services, and
// its route is announced again. (3) Replica 1 fails hard, as its node does:
// HAProxy and zerodrop SIGKILLed, its route withdrawn hardDetect later, its
// Pod deleted (standing for the node's Lease expiring, which ends its
// counting); then a new replica comes up and is announced. What (2) and (3)
// cost is measured, not asserted.
func actLBReplicaRestart(ctx context.Context, r *run) error {
	reps := r.replicas()
	if len(reps) < 2 {
		return fmt.Errorf("%s needs --data-plane-replicas 2 or more", scenarioLBReplicaRestart)
	}
	fig := &ReplicaFigures{HardDetectSeconds: hardDetect.Seconds()}
	r.replicaFigures = fig
	phase := r.rec.snapshot()
	// phaseEnd waits until steady and returns the phase's failures.
	phaseEnd := func() (int64, int64, error) {
		if err := r.waitSteady(ctx, replicas, r.steadyTimeout(replicas)); err != nil {
			return 0, 0, err
		}
		now := r.rec.snapshot()
		failed, broken := now.Failed-phase.Failed, now.LongBroken-phase.LongBroken
		phase = now
		return failed, broken, nil
	}

	d := reps[0]
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		before := d.landed()
		p := d.process()
		r.mark("replica 0: %s its zerodrop process", sig)
		p.Signal(sig)
		select {
		case <-p.Done():
		case <-time.After(30 * time.Second):
			return fmt.Errorf("replica 0's zerodrop process did not end after %s", sig)
		}
		if err := r.startReplicaProcess(ctx, d); err != nil {
			return err
		}
		r.mark("replica 0: zerodrop process ready")
		if !sleepCtx(ctx, idleVerify) {
			return ctx.Err()
		}
		r.restartWrites = append(r.restartWrites, d.landed()-before)
	}
	var err error
	if fig.RestartFailed, fig.RestartBroken, err = phaseEnd(); err != nil {
		return err
	}

	old := reps[1]
	others := otherMembers(reps, old)
	r.mark("replica 1: route withdrawn")
	if err := r.lab.net.routeTo(ctx, false, others...); err != nil {
		return err
	}
	if !sleepCtx(ctx, withdrawSettle) {
		return ctx.Err()
	}
	if err := r.stopReplica(ctx, old); err != nil {
		return fmt.Errorf("stop replica 1: %w", err)
	}
	r.mark("replica 1: stopped")
	if err := r.replaceReplica(ctx, old, reps); err != nil {
		return err
	}
	if fig.ReplaceFailed, fig.ReplaceBroken, err = phaseEnd(); err != nil {
		return err
	}

	old = r.replicas()[1]
	r.mark("replica 1: HAProxy and zerodrop SIGKILLed")
	if p := old.process(); p != nil {
		p.Signal(syscall.SIGKILL)
	}
	killByArg(filepath.Join(old.dir, "haproxy.cfg"))
	if !sleepCtx(ctx, hardDetect) {
		return ctx.Err()
	}
	r.mark("replica 1: route withdrawn, Pod gone")
	if err := r.lab.net.routeTo(ctx, false, otherMembers(r.replicas(), old)...); err != nil {
		return err
	}
	r.dropReplica(old)
	if err := r.stopReplica(ctx, old); err != nil {
		r.lab.logf("%s: after the hard failure: %v", r.name(), err)
	}
	if err := r.waitSteady(ctx, replicas, r.steadyTimeout(replicas)); err != nil {
		return err
	}
	if err := r.replaceReplica(ctx, old, r.replicas()); err != nil {
		return err
	}
	fig.HardFailed, fig.HardBroken, err = phaseEnd()
	return err
}

// otherMembers are the route members of reps but d.
func otherMembers(reps []*dpReplica, d *dpReplica) []int {
	var out []int
	for _, o := range reps {
		if o.index != d.index {
			out = append(out, o.index)
		}
	}
	return out
}

// replaceReplica starts a new pod for old's replica, waits until it serves
// the Service, makes it the run's, and announces its route.
func (r *run) replaceReplica(ctx context.Context, old *dpReplica, reps []*dpReplica) error {
	d := &dpReplica{index: old.index, gen: old.gen + 1, host: old.host}
	err := r.startReplica(ctx, d)
	r.setReplica(d)
	if err != nil {
		return fmt.Errorf("new replica %d: %w", d.index, err)
	}
	if err := waitFor(ctx, 60*time.Second, fmt.Sprintf("the new replica %d to serve the Service", d.index), func() (bool, string) {
		return r.backendsSteady(ctx, view{strconv.Itoa(d.index), d.prov}, replicas)
	}); err != nil {
		return err
	}
	r.mark("replica %d: new pod serves, route announced", d.index)
	members := append(otherMembers(reps, d), d.index)
	slices.Sort(members)
	return r.lab.net.routeTo(ctx, false, members...)
}

// maxDataPlaneReplicas bounds --data-plane-replicas.
const maxDataPlaneReplicas = 4

// dataPlaneRuns says why scenario cannot run with n data-plane replicas
// (nil: it can).
func dataPlaneRuns(scenario string, n int) error {
	sc, _ := scenarioNamed(scenario)
	switch {
	case n == 0 && sc.dataPlane:
		return fmt.Errorf("scenario %s needs --data-plane-replicas 2 or more", scenario)
	case n > 0 && !slices.Contains(dataPlaneScenarios, scenario):
		return fmt.Errorf("scenario %s does not run with --data-plane-replicas: it counts the writes of the one HAProxy the leader writes", scenario)
	}
	return nil
}

// dataPlaneSessions reads, for each replica running at the end, how many
// connections its HAProxy's frontends accepted (show stat, FRONTEND rows,
// stot): that the client's route spread the traffic over them. A replica
// replaced during the run counts from its replacement's start.
func (r *run) dataPlaneSessions() []int64 {
	var out []int64
	for _, d := range r.replicas() {
		n, err := frontendSessions(filepath.Join(d.dir, "admin.sock"))
		if err != nil {
			r.lab.logf("%s: sessions of replica %d: %v", r.name(), d.index, err)
			n = -1
		}
		out = append(out, n)
	}
	return out
}

// frontendSessions sums stot over the FRONTEND rows of `show stat` at the
// admin socket.
func frontendSessions(sock string) (int64, error) {
	c, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "show stat\n"); err != nil {
		return 0, err
	}
	rows, err := csv.NewReader(c).ReadAll()
	if err != nil {
		return 0, err
	}
	if len(rows) == 0 || len(rows[0]) == 0 {
		return 0, errors.New("show stat: no header")
	}
	rows[0][0] = strings.TrimPrefix(rows[0][0], "# ")
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	sv, stot := col["svname"], col["stot"]
	if stot == 0 {
		return 0, errors.New("show stat: no stot column")
	}
	var sum int64
	for _, row := range rows[1:] {
		if len(row) > stot && row[sv] == "FRONTEND" {
			n, err := strconv.ParseInt(row[stot], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("show stat: stot %q: %w", row[stot], err)
			}
			sum += n
		}
	}
	return sum, nil
}
