package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"zerodrop.dev/zerodrop/internal/supervisor"
)

// hookLeakMark is the argument of the endless hook's sleep, by which the
// test finds it.
const hookLeakMark = "876543"

// execHookImage is a stand-in /zerodrop: as a container it logs SIGTERM
// (to a file per pod in the image's directory, which outlives the pod's
// own) and exits; as `/zerodrop hook` (the preStop hook) it
// logs its start, waits for the file release in the emptyDir, logs its end;
// as `/zerodrop endless` it never ends; as `/zerodrop deaf` the container
// ignores SIGTERM.
const execHookImage = `#!/bin/sh
log=/run/image/$HOSTNAME.log
case "$1" in
hook)
	echo "hook-start $HOOK_ENV $(pwd)" >> $log
	while ! test -e /run/zerodrop/release; do sleep 0.05; done
	echo hook-end >> $log
	exit 0 ;;
endless)
	echo hook-start >> $log
	exec sleep ` + hookLeakMark + ` ;;
deaf)
	trap '' TERM ;;
*)
	trap 'echo term >> $log; exit 0' TERM ;;
esac
while :; do sleep 0.05; done
`

// TestExecPreStop runs a chart pod's exec preStop hook as the kubelet does:
// in the container (its emptyDir at /run/zerodrop, its working directory
// and environment), before the container's SIGTERM, which comes only once
// the hook has returned. A hook that outlasts the grace period is killed
// with every process it started, counts as failed, and the container still
// gets its SIGTERM and, ignoring it, the kill.
func TestExecPreStop(t *testing.T) {
	ctx := context.Background()
	l := newRootLab(t, "the exec hook test")
	image, dir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(image, "zerodrop"), []byte(execHookImage), 0o755); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("ca"), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ended := false
	var hooks []bool // each hook's failed
	t.Cleanup(func() { mu.Lock(); ended = true; mu.Unlock() })
	logf := func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			t.Logf(f, a...)
		}
	}
	env := podEnv{dial: l.Nodes[0].DialContext, lab: l, apiserver: "127.0.0.1:1", logDir: dir, hostIP: l.Nodes[0].IP.String(),
		containers: &ContainerEnv{ImageDir: image, Dir: dir, CAFile: ca,
			Token: func(context.Context, *corev1.Pod) (string, error) { return "token", nil }},
		hookDone: func(_ *corev1.Pod, failed bool) { mu.Lock(); hooks = append(hooks, failed); mu.Unlock() }}
	start := func(name string, args, hook []string) *podRuntime {
		t.Helper()
		netPod, err := l.AddPod(ctx, l.Nodes[0])
		if err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{
				NodeName: "node-1",
				Volumes:  []corev1.Volume{{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				Containers: []corev1.Container{{
					Name: "haproxy", Image: "zerodrop:test", Command: []string{"/zerodrop"}, Args: args, WorkingDir: "/run/zerodrop",
					Env:          []corev1.EnvVar{{Name: "HOOK_ENV", Value: "from-spec"}},
					VolumeMounts: []corev1.VolumeMount{{Name: "state", MountPath: "/run/zerodrop"}},
					Lifecycle:    &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: hook}}},
				}},
			},
		}
		r, err := startPodRuntime(pod, netPod, env, func() {}, logf)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.kill)
		// The container runs (an exec in it would find it).
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if ok, _ := r.execProbe(ctx, &r.pod.Spec.Containers[0], []string{"true"}); ok {
				return r
			}
			if time.Now().After(deadline) {
				t.Fatal("the container never started")
			}
		}
	}
	readLog := func(r *podRuntime) []string {
		data, _ := os.ReadFile(filepath.Join(image, r.pod.Name+".log"))
		return strings.Fields(strings.ReplaceAll(string(data), "\n", " | "))
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never happened", what)
			}
		}
	}
	finished := func(r *podRuntime) bool { _, f, _ := r.status(); return !f.IsZero() }

	// The hook runs in the container and holds the SIGTERM back until it
	// returns.
	r := start("p1", nil, []string{"/zerodrop", "hook"})
	r.terminate(time.Minute)
	waitFor("the hook's start", func() bool { return len(readLog(r)) > 0 })
	if err := os.WriteFile(filepath.Join(r.podDir(), "v", "state", "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor("the pod's end", func() bool { return finished(r) })
	if got, want := strings.Join(readLog(r), " "), "hook-start from-spec /run/zerodrop | hook-end | term |"; got != want {
		t.Errorf("the container's log: %q, want %q (the hook in the container, then SIGTERM)", got, want)
	}
	if _, _, code := r.status(); code != 0 {
		t.Errorf("the container exited %d, want 0 (by its SIGTERM trap)", code)
	}

	// A hook past the grace period is killed, its sleep too; the
	// container that ignores SIGTERM is killed.
	r = start("p2", []string{"deaf"}, []string{"/zerodrop", "endless"})
	r.terminate(2 * time.Second)
	waitFor("the pod's end", func() bool { return finished(r) })
	if _, _, code := r.status(); code != 137 {
		t.Errorf("the container that ignores SIGTERM exited %d, want 137 (killed)", code)
	}
	leaked := func(args []string) bool { return len(args) == 2 && args[0] == "sleep" && args[1] == hookLeakMark }
	if len(supervisor.Find(leaked)) > 0 {
		supervisor.KillMatching(leaked, 5*time.Second)
		t.Error("the hook killed at the grace period left its sleep running")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hooks) != 2 || hooks[0] || !hooks[1] {
		t.Errorf("hooks failed: %v, want [false true]", hooks)
	}
}
