package scenarios

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/provider"
)

// ChaosOptions tune the chaos scenarios; zero values take the defaults.
type ChaosOptions struct {
	MidPlanKills    int
	APIServerOutage time.Duration
}

// midPlanKills is kill-mid-plan's count of kills: ChaosOptions.MidPlanKills,
// or the world's default (world.KillDefault), or report.DefaultMidPlanKills.
func (l *lab) midPlanKills() int {
	if n := l.opts.Chaos.MidPlanKills; n > 0 {
		return n
	}
	if k, ok := l.opts.World.(world.KillDefault); ok {
		return k.MidPlanKills()
	}
	return report.DefaultMidPlanKills
}

func (o ChaosOptions) outage() time.Duration {
	if o.APIServerOutage > 0 {
		return o.APIServerOutage
	}
	return report.DefaultAPIServerOutage
}

// actKillMidPlan is kill-mid-plan (docs/lab.md's table of scenarios): the
// writer — the leader, or the world's (world.MidPlanWriters) — SIGKILLed
// from inside the first write of a plan (killAtFirstWrite: the write
// lands, the rest of its plan never does), MidPlanKills times, each kill
// recovered from (world.Writer.Recover); writes are counted per kill.
func actKillMidPlan(ctx context.Context, r *run) error {
	next := r.leaderWriter
	if w, ok := r.world.(world.MidPlanWriters); ok {
		next = w.MidPlanWriter
	}
	want := r.lab.midPlanKills()
	fig := r.chaosFigures()
	var at []int64
	rolling := false
	for fig.Kills < want {
		w, err := next(ctx, fig.Kills)
		if err != nil {
			return err
		}
		verb, err := r.killAtFirstWrite(ctx, w.OnWrite, w.Kill, want, &rolling)
		if err != nil {
			return err
		}
		n, err := r.world.Writes()
		if err != nil {
			return err
		}
		at = append(at, n)
		fig.Kills++
		fig.KillVerbs = append(fig.KillVerbs, verb)
		r.mark("SIGKILL %s at %q", w.Name, verb)
		r.stopping(fig.Kills-1, "SIGKILL")
		if err := w.Recover(ctx); err != nil {
			return fmt.Errorf("kill %d: %w", fig.Kills, err)
		}
	}
	if err := r.waitSteady(ctx, replicas, r.steadyTimeout(replicas)); err != nil {
		return err
	}
	n, err := r.world.Writes()
	if err != nil {
		return err
	}
	at = append(at, n)
	r.restartWrites = writesBetween(at)
	return nil
}

// leaderWriter is the controllers' leader, the one writer of the run's
// HAProxy: after the kill another replica takes the lease and the killed
// pod's replacement is ready.
func (r *run) leaderWriter(ctx context.Context, _ int) (world.Writer, error) {
	leader, err := r.waitLeader(ctx, "")
	if err != nil {
		return world.Writer{}, err
	}
	return world.Writer{
		Name: world.ShortPod(leader),
		OnWrite: func(f func(string)) {
			if ww, ok := r.world.(world.WriteWatcher); ok {
				ww.OnWrite(f)
			}
		},
		Kill: func() { _ = r.lab.agent.Signal(ctrlNamespace+"/"+leader, syscall.SIGKILL) },
		Recover: func(ctx context.Context) error {
			r.ctrls.gone(leader)
			next, err := r.waitLeader(ctx, leader)
			if err != nil {
				return err
			}
			r.mark("leader %s", world.ShortPod(next))
			return r.waitControllersReady(ctx, leader)
		},
	}, nil
}

// killAtFirstWrite calls kill (a SIGKILL of the writer) from inside the
// first write that lands at the sockets' proxies and returns that write's
// verb. A rolling update makes the plans: one is started whenever none is
// under way (*rolling), at most 2×want in the scenario.
func (r *run) killAtFirstWrite(ctx context.Context, watch func(f func(verb string)), kill func(), want int, rolling *bool) (string, error) {
	fig := r.chaosFigures()
	fired := make(chan string, 1)
	var once sync.Once
	watch(func(verb string) {
		once.Do(func() {
			kill()
			fired <- verb
		})
	})
	defer watch(nil)
	for {
		if !*rolling {
			if fig.Rollouts >= 2*want {
				return "", fmt.Errorf("kill-mid-plan: %d kills in %d rolling updates, want %d", fig.Kills, fig.Rollouts, want)
			}
			if err := r.rolloutRestart(ctx); err != nil {
				return "", err
			}
			fig.Rollouts++
			*rolling = true
		}
		select {
		case verb := <-fired:
			return verb, nil
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(500 * time.Millisecond):
			done, err := r.rolledOut(ctx, replicas)
			if err != nil {
				return "", err
			}
			*rolling = !done
		}
	}
}

// rolledOut reports whether the Deployment's rolling update is done: want
// updated, ready replicas and no pod terminating.
func (r *run) rolledOut(ctx context.Context, want int32) (bool, error) {
	d, err := r.lab.cp.Client.AppsV1().Deployments(r.ns).Get(ctx, appName, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	st := d.Status
	if st.ObservedGeneration < d.Generation || st.Replicas != want || st.UpdatedReplicas != want || st.ReadyReplicas != want {
		return false, nil
	}
	running, terminating := r.lab.agent.Counts(r.ns)
	return running == int(want) && terminating == 0, nil
}

func (r *run) chaosFigures() *report.ChaosFigures {
	if r.chaos == nil {
		r.chaos = &report.ChaosFigures{}
	}
	return r.chaos
}

// actAPIServerDown stops kube-apiserver (SIGSTOP: its connections stay open
// and nothing answers, as in a network partition) for APIServerOutage, longer
// than the leader's lease, while nothing else changes, then resumes it. The
// data plane must serve on untouched: no write lands while the controllers
// see nothing, no backend leaves; afterwards a leader is back and, nothing
// having changed, writes nothing.
func actAPIServerDown(ctx context.Context, r *run) error {
	fig := r.chaosFigures()
	outage := r.lab.opts.Chaos.outage()
	pid, err := controlplane.APIServerPID(r.lab.cp.Config.Host)
	if err != nil {
		return err
	}
	leader, err := r.waitLeader(ctx, "")
	if err != nil {
		return err
	}
	before, err := r.poolState(ctx)
	if err != nil {
		return err
	}
	n0, err := r.world.Writes()
	if err != nil {
		return err
	}
	leaderRestarts := r.lab.agent.ContainerRestartsOf(ctrlNamespace+"/"+leader, world.ControllerContainer)
	r.mark("kube-apiserver stopped for %s", outage)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stop kube-apiserver: %w", err)
	}
	resume := sync.OnceFunc(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	// Resumed on every way out: the lab's own clients need it.
	defer resume()
	start := time.Now()
	for time.Since(start) < outage {
		if !traffic.SleepCtx(ctx, statePeriod) {
			return ctx.Err()
		}
		if now, err := r.poolState(ctx); err == nil && now != before {
			fig.PoolChanges++
		}
	}
	n1, err := r.world.Writes()
	if err != nil {
		return err
	}
	resume()
	fig.OutageSeconds = time.Since(start).Seconds()
	fig.WritesDuringOutage = n1 - n0
	r.mark("kube-apiserver resumed")
	next, err := r.waitLeaderBack(ctx, time.Now())
	if err != nil {
		return err
	}
	r.mark("leader %s", world.ShortPod(next))
	if err := r.waitControllersReady(ctx, ""); err != nil {
		return err
	}
	if !traffic.SleepCtx(ctx, idleVerify) {
		return ctx.Err()
	}
	n2, err := r.world.Writes()
	if err != nil {
		return err
	}
	fig.WritesAfterRecovery = n2 - n1
	// The lab's kubelet replaces a pod of the runner's Deployment whose
	// process ended, and starts a world's pod's container (the chart's)
	// again in place.
	fig.LeaderExited = r.lab.agent.Finished(ctrlNamespace+"/"+leader) || r.lab.agent.ContainerRestartsOf(ctrlNamespace+"/"+leader, world.ControllerContainer) > leaderRestarts
	return r.waitSteady(ctx, replicas, r.steadyTimeout(replicas))
}

// waitLeaderBack waits until a controller pod that is running and ready
// says, in a scrape after back (when the API server returned), that it
// holds the lease; the old leader's process may have ended.
func (r *run) waitLeaderBack(ctx context.Context, back time.Time) (string, error) {
	var next string
	err := traffic.WaitFor(ctx, 90*time.Second, "a ready controller holding the lease", func() (bool, string) {
		next = ""
		for _, p := range r.ctrls.pods() {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning &&
				cluster.ConditionStatus(p, corev1.PodReady) == corev1.ConditionTrue && r.ctrls.leaderSince(p.Name, back) {
				next = p.Name
			}
		}
		return next != "", "no ready controller pod reports leader_election_master_status 1"
	})
	return next, err
}

// poolState is the run's HAProxy backends as one comparable string.
func (r *run) poolState(ctx context.Context) (string, error) {
	bs, err := r.world.Backends(ctx, r.addr)
	if err != nil {
		return "", err
	}
	out := make([]string, 0, len(bs))
	for _, b := range bs {
		out = append(out, fmt.Sprintf("%s %s:%d %s", b.Listener, b.Address, b.Port, b.State))
	}
	slices.Sort(out)
	return strings.Join(out, ","), nil
}

// duplicates counts the backends of the Service's first port that HAProxy
// has more than once (the same address and port under two server names).
func duplicates(bs []provider.BackendStatus, listener string) int {
	seen := map[string]int{}
	n := 0
	for _, b := range bs {
		if b.Listener != listener {
			continue
		}
		k := fmt.Sprintf("%s:%d", b.Address, b.Port)
		if seen[k]++; seen[k] == 2 {
			n++
		}
	}
	return n
}

// lossless is what a chaos scenario requires of zerodrop, checked once the
// run is measured: no request failed (but for a stall of the lab's own
// client), no connection broke, no backend was
// doubled, and for apiserver-down nothing was written or changed.
func lossless(res report.Result) error {
	var bad []string
	// A request late only because the lab process itself stalled (its
	// client woke too late to send it on time) is not zerodrop's: the
	// report counts it as failed, this check does not.
	if n := res.FailedRequests - res.RequestsLateStall; n > 0 {
		bad = append(bad, fmt.Sprintf("%d requests failed", n))
	}
	if res.LongConnsBroken > 0 {
		bad = append(bad, fmt.Sprintf("%d long connections broke", res.LongConnsBroken))
	}
	if res.DuplicateBackendSamples > 0 {
		bad = append(bad, fmt.Sprintf("a backend was doubled in %d samples", res.DuplicateBackendSamples))
	}
	// A failed drain hook (a call cut, refused or at its deadline) let a
	// pod stop before the load balancer stopped sending to it, lost or not.
	if res.HookFailures > 0 {
		bad = append(bad, fmt.Sprintf("%d preStop drain hooks failed", res.HookFailures))
	}
	if c := res.Chaos; c != nil && res.Scenario == report.ScenarioAPIServerDown {
		if c.WritesDuringOutage != 0 || c.WritesAfterRecovery != 0 {
			bad = append(bad, fmt.Sprintf("%d writes during the outage and %d after it, want 0", c.WritesDuringOutage, c.WritesAfterRecovery))
		}
		if c.PoolChanges != 0 {
			bad = append(bad, fmt.Sprintf("the backends changed in %d samples during the outage", c.PoolChanges))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%s: zerodrop must lose nothing: %s", res.Scenario, strings.Join(bad, "; "))
}
