package cluster

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// leakMark is the argument of the timed-out probe's background sleep, by
// which the test finds it.
const leakMark = "987654"

// TestExecProbe runs a chart pod's container (a stand-in /zerodrop that
// sleeps) in a lab pod namespace and its exec readiness probe as the
// kubelet does: the probe sees the container's emptyDir at /run/zerodrop,
// its working directory, its environment (a literal value, a field's, and
// a $(NAME) in the command expanded from a literal) and the pod's network
// (its IP); the file's presence turns the container ready and its removal
// unready. A probe that outlasts its timeout fails and leaves no process
// behind, its forks included.
func TestExecProbe(t *testing.T) {
	ctx := context.Background()
	l := newRootLab(t, "the exec probe test")
	netPod, err := l.AddPod(ctx, l.Nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	image, dir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(image, "zerodrop"), []byte("#!/bin/sh\nexec sleep 100000\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("ca"), 0o644); err != nil {
		t.Fatal(err)
	}
	ready := `test -e ready && test "$GREETING" = hello && test "$POD_NAME" = p1 && test "$0" = hello && ip -4 -o addr show | grep -qF " ` + netPod.IP.String() + `/"`
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "ns", UID: "abcdef0123"},
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			Volumes:  []corev1.Volume{{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{{
				Name: "controller", Image: "zerodrop:test", Command: []string{"/zerodrop"}, WorkingDir: "/run/zerodrop",
				Env: []corev1.EnvVar{{Name: "GREETING", Value: "hello"},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "state", MountPath: "/run/zerodrop"}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
					Command: []string{"/bin/sh", "-c", ready, "$(GREETING)"}}},
					PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 1},
			}},
		},
	}
	// The probe loop may log once more after the test (the kill ends it).
	var mu sync.Mutex
	ended := false
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
			Token: func(context.Context, *corev1.Pod) (string, error) { return "token", nil }}}
	r, err := startPodRuntime(pod, netPod, env, func() {}, logf)
	if err != nil {
		t.Fatal(err)
	}
	defer r.kill()
	state := filepath.Join(r.podDir(), "v", "state", "ready")
	waitReady := func(want bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if ready, _, _ := r.status(); ready["controller"] == want {
				return
			}
		}
		t.Fatalf("the container's readiness did not become %v", want)
	}
	c := &r.pod.Spec.Containers[0]
	if ok, detail := r.execProbe(ctx, c, c.ReadinessProbe.Exec.Command); ok {
		t.Fatalf("the probe passed without the file in the container's emptyDir (%s)", detail)
	}
	if err := os.WriteFile(state, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitReady(true)
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	waitReady(false)
	if err := os.WriteFile(state, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitReady(true)

	// A probe that outlasts its timeout: it fails, and neither its shell
	// nor the shell's background job is left.
	tctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if ok, detail := r.execProbe(tctx, c, []string{"/bin/sh", "-c", "sleep " + leakMark + " & wait"}); ok || detail != "timed out" {
		t.Errorf("a probe past its timeout: passed=%v (%s), want a failure by timeout", ok, detail)
	}
	leaked := func(args []string) bool { return len(args) == 2 && args[0] == "sleep" && args[1] == leakMark }
	for deadline := time.Now().Add(10 * time.Second); len(supervisor.Find(leaked)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			supervisor.KillMatching(leaked, 5*time.Second)
			t.Fatal("a timed-out probe's child outlived it")
		}
	}
	// A container that is not running fails the probe.
	r.crash()
	if ok, _ := r.execProbe(ctx, c, c.ReadinessProbe.Exec.Command); ok {
		t.Error("the probe passed in a container whose process is gone")
	}
}

// newRootLab is a lab of one node for a test of the pod runtime, closed
// when the test ends; the test (what) makes network and mount namespaces,
// which needs root.
func newRootLab(t *testing.T, what string) *netlab.Lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal(what + " makes network and mount namespaces and needs root")
	}
	l, err := netlab.New(context.Background(), netlab.Config{Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close lab: %v", err)
		}
	})
	return l
}
