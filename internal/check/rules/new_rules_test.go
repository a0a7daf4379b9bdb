package rules_test

import (
	"slices"
	"strings"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/check/manifest"
	"zerodrop.dev/zerodrop/internal/check/rules"
)

// TestZD207: a shell -c whose last command is a compound command, or a wait
// for a background server, with no exec and no trap, stays PID 1.
func TestZD207(t *testing.T) {
	cmd := func(command []string, args ...string) func(f *fixture) {
		return func(f *fixture) { f.container().Command, f.container().Args = command, args }
	}
	const ifElse = "if [ \"$MODE\" = debug ]; then\n  server --debug\nelse\n  server\nfi\n"
	runRule(t, "ZD207", []ruleCase{
		{"no command", nil, false, ""},
		{"server inside if/else", cmd([]string{"bash", "-c", ifElse}), true, `inside if … fi`},
		{"script in args", cmd([]string{"/bin/sh", "-c"}, ifElse), true, "sh -c"},
		{"exec in each branch", cmd([]string{"bash", "-c", "if [ -n \"$X\" ]; then exec server -x; else exec server; fi"}), false, ""},
		{"trap forwards the signal", cmd([]string{"bash", "-c", "trap 'kill -TERM $pid' TERM; if true; then server & pid=$!; fi; wait $pid"}), false, ""},
		{"one simple command", cmd([]string{"sh", "-c", "server --port 8080"}), false, ""},
		{"setup then the server last", cmd([]string{"sh", "-c", "if [ -f /cfg ]; then cp /cfg /etc; fi; server"}), false, ""},
		{"background and wait", cmd([]string{"sh", "-c", "server & wait"}), true, "in the background"},
		{"background and wait $!", cmd([]string{"sh", "-ec", "server --port 8080 &\nwait $!"}), true, "in the background"},
		{"a loop", cmd([]string{"sh", "-c", "while true; do server; sleep 1; done"}), true, "inside a loop"},
		{"redirect is no background", cmd([]string{"sh", "-c", "server 2>&1 | tee /log"}), false, ""},
		{"not a shell", cmd([]string{"python", "-c", "if True:\n  serve()\n"}), false, ""},
		{"args without command", cmd(nil, "bash", "-c", ifElse), false, ""},
	})
}

// TestZD208: the container the serving one forwards to on localhost must
// stop after it and not before the deregistration time (generic: 35 s;
// grace period 60 s).
func TestZD208(t *testing.T) {
	backend := func(preStop int64) func(f *fixture) {
		return func(f *fixture) {
			f.container().Args = []string{"--backend=grpc://127.0.0.1:50051"}
			b := corev1.Container{Name: "server", Ports: []corev1.ContainerPort{{ContainerPort: 50051}}}
			if preStop >= 0 {
				b.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: preStop}}}
			}
			f.spec().Containers = append(f.spec().Containers, b)
		}
	}
	runRule(t, "ZD208", []ruleCase{
		{"one container", nil, false, ""},
		{"backend without delay", backend(-1), true, `"server" receives the requests container "app" forwards to localhost:50051`},
		{"backend with the front's delay", all(sleepAction(40), backend(40)), true, "at the same time as"},
		{"backend shorter than the front", all(sleepAction(40), backend(20)), true, "before"},
		{"backend longer than the front and deregistration", all(sleepAction(40), backend(50)), false, ""},
		{"backend longer than the front but short of deregistration", all(sleepAction(10), backend(20)), true, ""},
		{"front hook unknown", all(httpHook("/quit"), backend(-1)), false, ""},
		{"port nobody declares", all(backend(-1), func(f *fixture) { f.container().Args = []string{"--backend=127.0.0.1:9999"} }), false, ""},
		{"address in the environment", all(backend(-1), func(f *fixture) {
			f.container().Args = nil
			f.container().Env = []corev1.EnvVar{{Name: "UPSTREAM", Value: "http://localhost:50051"}}
		}), true, ""},
		{"a Cloud SQL proxy backend is ZD206's", all(backend(-1), func(f *fixture) {
			f.spec().Containers[1].Image = "gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.14.1"
		}), false, ""},
		{"backend as a native sidecar", func(f *fixture) {
			f.container().Args = []string{"--upstream=http://localhost:50051"}
			f.spec().InitContainers = append(f.spec().InitContainers, corev1.Container{Name: "server", Ports: []corev1.ContainerPort{{ContainerPort: 50051}},
				RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)})
		}, false, ""},
	})
}

// TestZD305: spec.replicas beside an autoscaler of the same input.
func TestZD305(t *testing.T) {
	hpa := func(lo, hi int32) func(f *fixture) {
		return func(f *fixture) {
			h := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
				Spec: autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: "Deployment", Name: "web"},
					MinReplicas: ptr.To(lo), MaxReplicas: hi}}
			f.extra = append(f.extra, manifest.Object{Source: manifest.Source{File: "app.yaml", Line: 80}, Kind: manifest.KindHPA, Obj: h})
		}
	}
	unset := func(f *fixture) { f.dep.Spec.Replicas = nil }
	runRule(t, "ZD305", []ruleCase{
		{"no autoscaler", nil, false, ""},
		{"replicas beside an autoscaler", hpa(3, 10), true, "spec.replicas 3 is set and HorizontalPodAutoscaler web scales the workload"},
		{"replicas unset", all(hpa(3, 10), unset), false, ""},
		{"fixed-size autoscaler equal to replicas", hpa(3, 3), false, ""},
		{"autoscaler of another workload", all(hpa(3, 10), func(f *fixture) {
			f.extra[len(f.extra)-1].Obj.(*autoscalingv2.HorizontalPodAutoscaler).Spec.ScaleTargetRef.Name = "api"
		}), false, ""},
		{"read from a cluster", all(hpa(3, 10), func(f *fixture) { f.cluster = true }), false, ""},
	})
}

// TestZD205: a grace period below the deregistration time (generic: 35 s)
// and the default, with no preStop delay or a hook of unknown length, which
// the grace period bounds whatever it waits for.
func TestZD205(t *testing.T) {
	grace := func(g int64) func(f *fixture) {
		return func(f *fixture) { f.spec().TerminationGracePeriodSeconds = ptr.To(g) }
	}
	noHook := func(f *fixture) { f.container().Lifecycle = nil }
	runRule(t, "ZD205", []ruleCase{
		{"long grace period", nil, false, ""},
		{"no hook, grace 10", all(noHook, grace(10)), true, "has no preStop delay"},
		{"no hook, default grace", all(noHook, func(f *fixture) { f.spec().TerminationGracePeriodSeconds = nil }), false, ""},
		{"unknown hook, grace 10", all(sleepExec("/wait-shutdown"), grace(10)), true, `has preStop exec "/wait-shutdown", whose length is unknown`},
		{"unknown hook, grace 30", all(sleepExec("/wait-shutdown"), grace(30)), false, ""},
		{"known sleep, grace 10 is ZD203's", all(sleepAction(20), grace(10)), false, ""},
	})
	t.Run("unknown hook, grace 0 is an error", func(t *testing.T) {
		f := newFixture()
		all(sleepExec("/wait-shutdown"), grace(0))(f)
		rep := f.analyze()
		i := slices.IndexFunc(rep.Findings, func(fd rules.Finding) bool { return fd.Rule == "ZD205" })
		if i < 0 || rep.Findings[i].Severity != rules.Error || !strings.Contains(rep.Findings[i].Message, "2 s together") {
			t.Fatalf("want ZD205 error naming the 2 s window; findings:\n%s", dump(rep.Findings))
		}
	})
}
