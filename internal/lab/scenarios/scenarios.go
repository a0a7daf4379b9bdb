package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/model"
)

// scenario is one kind of disruption, run under traffic.
type scenario struct {
	Name     string
	about    string
	replicas int32
	// policy, when set, is the only traffic policy the scenario runs with.
	policy string
	// act disrupts and returns once the workload is steady again.
	act func(ctx context.Context, r *run) error
	// modes, when set, are the only modes the scenario runs in.
	modes []report.Mode
	// lossless: a zerodrop run fails unless it lost nothing (see lossless).
	lossless bool
	// dataPlane: the scenario disrupts a data plane of replicas, and runs
	// only with --data-plane-replicas (and is left out of `all` without).
	dataPlane bool
}

// dataPlaneScenarios are the scenarios that run with a data plane of
// replicas: those whose disruption is the workload's or the data plane's
// (kill-mid-plan kills the replicas' processes there). restart-idle and
// apiserver-down are about the leader as the writer of the one HAProxy,
// which a data plane of replicas has not.
var dataPlaneScenarios = []string{"rollout", "rollout-local", "restart", "scale-down", "drain-node", "churn", report.ScenarioKillMidPlan, ScenarioLBReplicaRestart}

// scenarios in the order `all` runs them.
var All = []scenario{
	{Name: "rollout", about: "rolling update of a 3-replica Deployment", replicas: replicas, act: actRollout},
	{Name: "rollout-local", about: "rolling update of a 1-replica Deployment behind an externalTrafficPolicy Local Service: the last pod of its node replaced by one on another node",
		replicas: 1, policy: PolicyLocal, act: actRolloutLocal},
	{Name: scenarioRestartIdle, about: "nothing changes: the load balancer's writer killed and restarted 6 times, SIGKILL and SIGTERM in turn, while WebSockets stay connected through an externalTrafficPolicy Local Service",
		replicas: replicas, policy: PolicyLocal, act: actRestartIdle},
	{Name: "restart", about: "the controller restarted 3 times during a rolling update", replicas: replicas, act: actRestart},
	{Name: "scale-down", about: "3 → 1 replicas", replicas: replicas, act: actScaleDown},
	{Name: "drain-node", about: "cordon a node, evict its pods through the eviction API", replicas: 4, act: actDrainNode},
	{Name: "churn", about: "repeated scale up/down while the Service's annotations and ports flip", replicas: replicas, act: actChurn},
	// Chaos (make chaos). Killing the writer mid-plan needs a writer whose
	// plans follow the endpoints: the upstream controller's follow the
	// nodes, which a rollout leaves alone.
	{Name: report.ScenarioKillMidPlan, about: "the writer SIGKILLed at the first write of a plan, --kills times (default 20), during rolling updates",
		replicas: replicas, act: actKillMidPlan, modes: []report.Mode{report.ModeZerodrop}, lossless: true},
	{Name: report.ScenarioAPIServerDown, about: "kube-apiserver stopped for --apiserver-outage (default 30 s, longer than the leader's lease) while nothing changes",
		replicas: replicas, act: actAPIServerDown, lossless: true},
	// The HAProxy data plane of replicas (--data-plane-replicas).
	{Name: ScenarioLBReplicaRestart, about: "nothing changes: a data-plane replica's zerodrop process restarted (SIGKILL, SIGTERM) while its HAProxy serves; another replica replaced as a DaemonSet update does; then that one failing hard",
		replicas: replicas, act: actLBReplicaRestart, modes: []report.Mode{report.ModeZerodrop}, dataPlane: true},
}

// scenarioVariants are the variants sc runs in: all, or, for a scenario
// bound to a traffic policy, each backend once with that policy.
func scenarioVariants(sc scenario, all []variant) []variant {
	if sc.Name == report.ScenarioKillMidPlan {
		// Node mode with Cluster sends to every node whatever the pods do:
		// a rollout makes no plan, so there is no plan to kill the writer in.
		all = slices.DeleteFunc(slices.Clone(all), func(v variant) bool { return v == variant{BackendNode, PolicyCluster} })
	}
	if sc.policy == "" {
		return all
	}
	var out []variant
	seen := map[string]bool{}
	for _, v := range all {
		if !seen[v.backend] {
			seen[v.backend] = true
			out = append(out, variant{v.backend, sc.policy})
		}
	}
	return out
}

func ScenarioNamed(name string) (scenario, bool) {
	for _, s := range All {
		if s.Name == name {
			return s, true
		}
	}
	return scenario{}, false
}

// settle is the warm-up and cool-down around the disruption.
const settle = 2 * time.Second

// actTimeout bounds how long a scenario's act may take before it counts as
// failed: the workload's steady-state bound plus 30 s, and for restart-idle
// 40 s per restart (a lease to expire, a replacement to start, idleVerify).
func (r *run) actTimeout(sc scenario) time.Duration {
	d := r.steadyTimeout(max(sc.replicas, 4)) + 30*time.Second
	switch sc.Name {
	case scenarioRestartIdle:
		d += IdleRestarts * 40 * time.Second
	case report.ScenarioKillMidPlan:
		// A lease to expire, a replacement to start, a rollout to resume.
		d += time.Duration(r.lab.opts.Chaos.kills()) * 60 * time.Second
	case report.ScenarioAPIServerDown:
		d += r.lab.opts.Chaos.outage() + 90*time.Second
	}
	return d
}

// runScenario runs one scenario in one mode, backend and traffic policy,
// and reports what the clients saw.
func (l *lab) runScenario(ctx context.Context, sc scenario, v variant, mode report.Mode) (report.Result, error) {
	l.runs++
	r := &run{lab: l, id: l.runs, scenario: sc.Name, mode: mode, backend: v.backend, policy: v.policy,
		ns:    fmt.Sprintf("lab-%d-%s-%s", l.runs, sc.Name, mode),
		class: fmt.Sprintf("zerodrop.dev/lab-%d", l.runs),
		dir:   fmt.Sprintf("%s/haproxy-%d", l.dir, l.runs)}
	l.curMu.Lock()
	l.current = r
	l.curMu.Unlock()
	res := report.Result{Scenario: sc.Name, Mode: string(mode), Backend: v.backend, ExternalTrafficPolicy: v.policy}
	defer r.teardown()
	label := fmt.Sprintf("%-10s %-13s %-8s", sc.Name, v, mode)
	l.progressf("%s setting up (%s)", label, sc.about)
	setupStart := time.Now()
	if err := r.setup(ctx, sc.replicas); err != nil {
		return res, err
	}
	l.logf("%s: steady after %s", r.name(), time.Since(setupStart).Round(time.Millisecond))

	base := r.counters()
	landedBase, err := r.landed()
	if err != nil {
		return res, err
	}
	r.rec = traffic.NewRecorder()
	tctx, stopTraffic := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var lanes []report.BackendLane
	wg.Add(3)
	res.Frontend, res.TrafficStart, res.ClientNetns = r.addr, report.Timestamp(r.rec.Start), l.net.Client.Name
	// An outside client can count too, from the same namespace: the
	// frontend is where the lab's clients send to.
	l.progressf("%s traffic start frontend=%s netns=%s rate=%d/s", label, r.addr, l.net.Client.Name, l.opts.Rate)
	go func() {
		defer wg.Done()
		traffic.RunTraffic(tctx, l.net.Client.DialContext, r.addr, l.opts.Rate, r.rec)
	}()
	go func() { defer wg.Done(); l.progress(tctx, r, landedBase) }()
	go func() { defer wg.Done(); lanes = r.sampleStates(tctx, r.rec.Start) }()

	if traffic.SleepCtx(ctx, settle) {
		actx, cancel := context.WithTimeout(ctx, r.actTimeout(sc))
		actStart := time.Now()
		err = sc.act(actx, r)
		cancel()
		if err == nil {
			res.RolloutSeconds = float64(time.Since(actStart).Milliseconds()) / 1000
			r.mark("steady")
			traffic.SleepCtx(ctx, settle)
		}
	}
	// The schedule ends here (requests in flight still finish and count):
	// an outside client stops its own schedule at this line.
	l.progressf("%s traffic end", label)
	stopTraffic()
	wg.Wait()
	res.TrafficEnd = report.Timestamp(time.Now())
	res.DataPlaneSessions = r.dataPlaneSessions()
	if err == nil {
		err = ctx.Err()
	}
	snap := r.rec.Snapshot()
	c := r.counters().Sub(base)
	res.Requests, res.FailedRequests, res.RequestsLate = snap.Requests, snap.Failed, snap.Late
	res.RequestsLateStall = snap.LateStall
	res.LongConns, res.LongConnsClosed, res.LongConnsBroken = snap.LongConns, snap.LongClosed, snap.LongBroken
	p50, longest := snap.ReconnectStats()
	res.ReconnectP50Ms, res.ReconnectMaxMs = report.Milliseconds(p50), report.Milliseconds(longest)
	res.ControllerWrites, res.ProviderConflicts = int64(c.Writes), int64(c.Conflicts)
	res.DrainDrained, res.DrainDeadline = int64(c.Drained), int64(c.Deadline)
	res.HookFailures = l.hookFailures(r.ns)
	res.DrainRelayRetries = l.relayRetries(r.ns)
	res.WritesPerRestart = r.restartWrites
	res.DataPlaneReplicas = len(r.replicas())
	res.ReplicaDisruption = r.replicaFigures
	res.Chaos = r.chaos
	res.DuplicateBackendSamples = r.dupSamples.Load()
	landed, lerr := r.landed()
	res.ProviderWrites = landed - landedBase
	if err == nil {
		err = lerr
	}
	res.DurationSeconds = float64(time.Since(r.rec.Start).Milliseconds()) / 1000
	res.Timeline = &report.Timeline{Seconds: snap.Seconds, Failures: snap.Failures, Markers: r.markers,
		LongClosed: snap.LongClosed, Exchanges: snap.Exchanges, Lanes: lanes}
	l.logFailures(r, snap)
	if err == nil && sc.lossless && mode == report.ModeZerodrop {
		err = lossless(res)
	}
	return res, err
}

func (l *lab) logFailures(r *run, snap traffic.Snapshot) {
	kinds := map[string]int{}
	for _, f := range snap.Failures {
		kinds[f.Source+"/"+f.Kind]++
	}
	b, _ := json.Marshal(kinds)
	p50, longest := snap.ReconnectStats()
	l.logf("%s: %d requests, %d failed (%d late, %d of them the client's stall), %d long conns (%d broken, %d closed with 1001, %d echoed messages, %d reconnects: p50 %s, max %s), failures by kind %s",
		r.name(), snap.Requests, snap.Failed, snap.Late, snap.LateStall, snap.LongConns, snap.LongBroken, snap.LongClosed, snap.Exchanges,
		len(snap.Reconnects), p50.Round(time.Millisecond), longest.Round(time.Millisecond), b)
	for _, f := range snap.Failures {
		l.logf("  %6.2fs %-7s %-7s %s", f.At.Seconds(), f.Source, f.Kind, f.Detail)
	}
}

// progress prints a line every 5 s while the traffic runs; writes are those
// counted at HAProxy's sockets.
func (l *lab) progress(ctx context.Context, r *run, landedBase int64) {
	for traffic.SleepCtx(ctx, 5*time.Second) {
		s := r.rec.Snapshot()
		landed, _ := r.landed()
		l.progressf("%-10s %-13s %-8s %4.0fs  requests %5d  failed %4d (late %d)  long %3d (closed %d, broken %d)  writes %d",
			r.scenario, r.backend+"/"+r.policy, r.mode, time.Since(r.rec.Start).Seconds(), s.Requests, s.Failed, s.Late, s.LongConns,
			s.LongClosed, s.LongBroken, landed-landedBase)
	}
}

// actRollout changes the pod template (as `kubectl rollout restart` does)
// and waits for the rollout and every old pod's end.
func actRollout(ctx context.Context, r *run) error {
	if err := r.rolloutRestart(ctx); err != nil {
		return err
	}
	return r.waitSteady(ctx, replicas, r.steadyTimeout(replicas))
}

// actRolloutLocal replaces the one pod by one on another node (the lab's
// scheduler spreads: the old pod's node has a pod, the others none), so the
// old node's last local endpoint leaves while the new node's health check
// has yet to pass.
func actRolloutLocal(ctx context.Context, r *run) error {
	before, err := r.podNodeNames(ctx)
	if err != nil {
		return err
	}
	if err := r.rolloutRestart(ctx); err != nil {
		return err
	}
	if err := r.waitSteady(ctx, 1, r.steadyTimeout(replicas)); err != nil {
		return err
	}
	after, err := r.podNodeNames(ctx)
	if err != nil {
		return err
	}
	if len(before) != 1 || len(after) != 1 || before[0] == after[0] {
		return fmt.Errorf("rollout-local: the pod ran on %v and then on %v, want one node and then another", before, after)
	}
	return nil
}

// actRestart restarts the controller 3 times during a rollout: its pod
// deleted, and 2 s after its replacement is ready the next one.
func actRestart(ctx context.Context, r *run) error {
	if err := r.rolloutRestart(ctx); err != nil {
		return err
	}
	for range 3 {
		if !traffic.SleepCtx(ctx, 2*time.Second) {
			return ctx.Err()
		}
		if err := r.restartController(ctx); err != nil {
			return err
		}
	}
	return r.waitSteady(ctx, replicas, r.steadyTimeout(replicas))
}

// scenarioRestartIdle is the Azure incident: the writer restarted while
// nothing changes.
const scenarioRestartIdle = "restart-idle"

// idleRestarts is how often restart-idle restarts the writer (the incident's
// count); idleVerify how long it then lets the new writer work before the
// next restart (its first sync of every Service takes well under that).
const (
	IdleRestarts = 6
	idleVerify   = 5 * time.Second
)

// actRestartIdle kills the process that writes the load balancer (the
// leader: zerodrop's controller, or the upstream service controller's
// cloud-controller-manager) idleRestarts times, with SIGKILL and SIGTERM in
// turn, as the kubelet or an OOM kill would, and each time waits for another
// replica to take the lease (the killed pod's ReplicaSet replaces it) and
// idleVerify more. Every write counted at HAProxy's sockets from one kill to
// the next (the last: to the end of the act) is that restart's.
func actRestartIdle(ctx context.Context, r *run) error {
	var at []int64
	for i := range IdleRestarts {
		sig, name := syscall.SIGKILL, "SIGKILL"
		if i%2 == 1 {
			sig, name = syscall.SIGTERM, "SIGTERM"
		}
		target, err := r.waitLeader(ctx, "")
		if err != nil {
			return err
		}
		n, err := r.landed()
		if err != nil {
			return err
		}
		at = append(at, n)
		r.mark("%s %s", name, shortPod(target))
		if err := r.lab.agent.Signal(ctrlNamespace+"/"+target, sig); err != nil {
			return fmt.Errorf("restart %d: %w", i+1, err)
		}
		r.ctrls.gone(target)
		next, err := r.waitLeader(ctx, target)
		if err != nil {
			return fmt.Errorf("restart %d: %w", i+1, err)
		}
		r.mark("leader %s", shortPod(next))
		if err := r.waitControllersReady(ctx, target); err != nil {
			return fmt.Errorf("restart %d: %w", i+1, err)
		}
		if !traffic.SleepCtx(ctx, idleVerify) {
			return ctx.Err()
		}
	}
	n, err := r.landed()
	if err != nil {
		return err
	}
	at = append(at, n)
	r.restartWrites = writesBetween(at)
	return r.waitSteady(ctx, replicas, r.steadyTimeout(replicas))
}

// writesBetween turns the landed-write counts read at each restart (and
// once at the end) into the writes of each restart.
func writesBetween(at []int64) []int64 {
	var out []int64
	for i := 1; i < len(at); i++ {
		out = append(out, at[i]-at[i-1])
	}
	return out
}

// actScaleDown scales from 3 to 1 replica.
func actScaleDown(ctx context.Context, r *run) error {
	if err := r.scale(ctx, 1); err != nil {
		return err
	}
	return r.waitSteady(ctx, 1, r.steadyTimeout(replicas))
}

// actDrainNode does what `kubectl drain` does: cordon the node with the
// most pods, then evict each of its pods through the eviction API, retrying
// while a PodDisruptionBudget refuses (429), and waits for the replacements.
func actDrainNode(ctx context.Context, r *run) error {
	cs := r.lab.cp.Client
	pods, err := cs.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	byNode := map[string][]string{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p.Name)
		}
	}
	nodes := make([]string, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
	}
	if len(nodes) == 0 {
		return fmt.Errorf("no scheduled pods")
	}
	sort.Slice(nodes, func(i, j int) bool {
		if len(byNode[nodes[i]]) != len(byNode[nodes[j]]) {
			return len(byNode[nodes[i]]) > len(byNode[nodes[j]])
		}
		return nodes[i] < nodes[j]
	})
	node := nodes[0]
	r.mark("cordon %s", node)
	r.cordoned = append(r.cordoned, node)
	if err := r.lab.setUnschedulable(ctx, node, true); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(byNode[node]))
	for _, name := range byNode[node] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- r.evict(ctx, name)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return r.waitSteady(ctx, 4, r.steadyTimeout(4))
}

// evict asks the eviction API until it agrees (kubectl drain retries every
// 5 s; the lab every second).
func (r *run) evict(ctx context.Context, pod string) error {
	refused := false
	for {
		err := r.lab.cp.Client.PolicyV1().Evictions(r.ns).Evict(ctx, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: r.ns}})
		switch {
		case err == nil:
			r.mark("evicted %s", shortPod(pod))
			return nil
		case apierrors.IsNotFound(err):
			return nil
		case apierrors.IsTooManyRequests(err):
			if !refused {
				r.mark("PDB refuses %s", shortPod(pod))
				refused = true
			}
		default:
			return fmt.Errorf("evict %s: %w", pod, err)
		}
		if !traffic.SleepCtx(ctx, time.Second) {
			return ctx.Err()
		}
	}
}

// actChurn scales up and down every 1.5 s while the Service is changed every
// 2 s (health-check interval annotation and a second port, in turn), for
// 15 s; then back to 3 replicas and the original Service.
func actChurn(ctx context.Context, r *run) error {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; traffic.SleepCtx(cctx, 1500*time.Millisecond); i++ {
			if err := r.scale(ctx, []int32{5, 2, 4, 3, 5, 2, 4, 3, 5, 2}[i%10]); err != nil {
				errs <- err
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; traffic.SleepCtx(cctx, 2*time.Second); i++ {
			if err := r.flipService(ctx, i); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	if err := r.scale(ctx, replicas); err != nil {
		return err
	}
	if err := r.restoreService(ctx); err != nil {
		return err
	}
	return r.waitSteady(ctx, replicas, r.steadyTimeout(replicas))
}

// flipService changes the Service the way a team does while it deploys:
// step i%4 sets the health-check interval annotation, adds a second port,
// removes the annotation, removes the port.
func (r *run) flipService(ctx context.Context, i int) error {
	labels := []string{"annotate health-check-interval=3s", "add port 8001", "remove annotation", "remove port 8001"}
	r.mark("service: %s", labels[i%4])
	return r.updateService(ctx, func(svc *corev1.Service) {
		switch i % 4 {
		case 0:
			if svc.Annotations == nil {
				svc.Annotations = map[string]string{}
			}
			svc.Annotations[model.AnnotationHealthCheckInterval] = "3s"
		case 1:
			svc.Spec.Ports = append(svc.Spec.Ports[:1], corev1.ServicePort{Name: "alt", Port: servicePort + 1,
				TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP})
		case 2:
			delete(svc.Annotations, model.AnnotationHealthCheckInterval)
		case 3:
			svc.Spec.Ports = svc.Spec.Ports[:1]
		}
	})
}

func (r *run) restoreService(ctx context.Context) error {
	return r.updateService(ctx, func(svc *corev1.Service) {
		delete(svc.Annotations, model.AnnotationHealthCheckInterval)
		svc.Spec.Ports = svc.Spec.Ports[:1]
	})
}

func (r *run) updateService(ctx context.Context, change func(*corev1.Service)) error {
	services := r.lab.cp.Client.CoreV1().Services(r.ns)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		svc, err := services.Get(ctx, appName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(svc)
		_, err = services.Update(ctx, svc, metav1.UpdateOptions{})
		return err
	})
}

// rolloutRestart is `kubectl rollout restart`: a new template annotation.
func (r *run) rolloutRestart(ctx context.Context) error {
	r.mark("rollout")
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"lab.zerodrop.dev/restartedAt":%q}}}}}`,
		time.Now().Format(time.RFC3339Nano))
	_, err := r.lab.cp.Client.AppsV1().Deployments(r.ns).Patch(ctx, appName, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func (r *run) scale(ctx context.Context, n int32) error {
	r.mark("scale to %d", n)
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
	_, err := r.lab.cp.Client.AppsV1().Deployments(r.ns).Patch(ctx, appName, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func (l *lab) setUnschedulable(ctx context.Context, node string, on bool) error {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
	_, err := l.cp.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// shortPod drops the Deployment's name prefix: web-7d9c…-x2k4p → x2k4p.
func shortPod(name string) string {
	if i := len(name) - 5; i > 0 {
		return name[i:]
	}
	return name
}
