package install

import (
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"zerodrop.dev/zerodrop/internal/cmd/haproxyrun"
)

// stopMargin is what the grace period must leave after haproxy.hardStopAfter:
// the hooks return when the master has exited, and the kubelet then gives
// each container's SIGTERM at least 2 s before its SIGKILL.
const stopMargin = 5 * time.Second

// TestChartDataPlaneStopsSoftly: both containers of the data-plane pod have
// a preStop hook that `zerodrop haproxy stop` accepts, on the haproxy
// container's state directory (the one its HAProxy's master socket is in
// for the controller too): the haproxy container's stops HAProxy softly,
// the controller container's only waits. hardStopAfter, when set, ends the
// drain within the grace period with a margin. A surge strategy a user
// sets reaches the DaemonSet as given.
func TestChartDataPlaneStopsSoftly(t *testing.T) {
	surge := []string{"haproxy.updateStrategy.rollingUpdate.maxSurge=1", "haproxy.updateStrategy.rollingUpdate.maxUnavailable=0"}
	for _, tc := range []struct {
		set   []string
		surge bool
	}{
		{},
		{set: []string{"haproxy.hardStopAfter=30s"}},
		{set: surge, surge: true},
	} {
		t.Run(fmt.Sprint(tc.set), func(t *testing.T) {
			objs := render(t, append(append([]string(nil), haproxyValues...), tc.set...)...)
			ds := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "zerodrop-data-plane"))
			spec := ds.Spec.Template.Spec
			hc, zc := spec.Containers[0], spec.Containers[1]
			hcfg, err := haproxyrun.Parse(hc.Args[1:], io.Discard)
			if err != nil {
				t.Fatalf("haproxy container args %q: %v", hc.Args, err)
			}
			dp := containerArgs(t, zc)
			if got := filepath.Dir(dp.HAProxy.MasterSocket); got != hcfg.Dir {
				t.Fatalf("the controller's master socket is in %s, the haproxy container's directory is %s", got, hcfg.Dir)
			}
			for _, c := range []struct {
				container corev1.Container
				wait      bool
			}{{hc, false}, {zc, true}} {
				stop := stopHook(t, c.container)
				if stop.Dir != hcfg.Dir || stop.Wait != c.wait || stop.Timeout != 0 {
					t.Errorf("container %s: preStop stops %s with --wait=%t --timeout=%s; want %s, --wait=%t, no timeout (the grace period bounds it)",
						c.container.Name, stop.Dir, stop.Wait, stop.Timeout, hcfg.Dir, c.wait)
				}
			}
			grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
			if h := dp.HAProxy.HardStopAfter; h > 0 && h+stopMargin > grace {
				t.Errorf("hard-stop-after %s leaves less than %s of the grace period %s", h, stopMargin, grace)
			}
			if tc.surge {
				ru := ds.Spec.UpdateStrategy.RollingUpdate
				if ru == nil || ru.MaxSurge == nil || *ru.MaxSurge != intstr.FromInt32(1) || ru.MaxUnavailable == nil || *ru.MaxUnavailable != intstr.FromInt32(0) {
					t.Errorf("update strategy %+v, want maxSurge 1 and maxUnavailable 0", ds.Spec.UpdateStrategy)
				}
			}
		})
	}
}

// stopHook is container c's preStop hook parsed as `zerodrop haproxy stop`.
func stopHook(t *testing.T, c corev1.Container) haproxyrun.StopConfig {
	t.Helper()
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
		t.Fatalf("container %s: no exec preStop hook", c.Name)
	}
	cmd := c.Lifecycle.PreStop.Exec.Command
	if len(cmd) < 3 || cmd[0] != "/zerodrop" || cmd[1] != "haproxy" || cmd[2] != haproxyrun.StopCommand {
		t.Fatalf("container %s: preStop %q, want /zerodrop haproxy %s", c.Name, cmd, haproxyrun.StopCommand)
	}
	stop, err := haproxyrun.ParseStop(cmd[3:], io.Discard)
	if err != nil {
		t.Fatalf("container %s: preStop %q: %v", c.Name, cmd, err)
	}
	return stop
}
