package check_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/check"
)

// manifest10k is a 10,000-document stream shaped like `helm template` output
// for 2,500 releases in 100 namespaces: a LoadBalancer Service, a Deployment,
// a PodDisruptionBudget and a ConfigMap each.
func manifest10k() []byte {
	var b bytes.Buffer
	for i := range 2500 {
		ns := fmt.Sprintf("team-%d", i%100)
		app := fmt.Sprintf("app-%d", i)
		fmt.Fprintf(&b, `---
# Source: %[1]s/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
  name: %[1]s
  namespace: %[2]s
  labels: {app.kubernetes.io/name: %[1]s, app.kubernetes.io/managed-by: Helm}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  selector: {app.kubernetes.io/name: %[1]s}
  ports:
  - {name: http, port: 80, targetPort: http}
---
# Source: %[1]s/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
  namespace: %[2]s
  labels: {app.kubernetes.io/name: %[1]s, app.kubernetes.io/managed-by: Helm}
spec:
  replicas: %[3]d
  selector:
    matchLabels: {app.kubernetes.io/name: %[1]s}
  template:
    metadata:
      labels: {app.kubernetes.io/name: %[1]s, app.kubernetes.io/version: "1.0.0"}
    spec:
      terminationGracePeriodSeconds: 45
      containers:
      - name: app
        image: example/%[1]s:1.0.0
        ports:
        - {name: http, containerPort: 8080, protocol: TCP}
        - {name: metrics, containerPort: 9090, protocol: TCP}
        env:
        - {name: LOG_LEVEL, value: info}
        - {name: PORT, value: "8080"}
        readinessProbe:
          httpGet: {path: /ready, port: http}
          periodSeconds: 5
        livenessProbe:
          httpGet: {path: /live, port: http}
          failureThreshold: 6
        lifecycle:
          preStop:
            exec: {command: [sh, -c, "sleep 20 && kill -TERM 1"]}
        resources:
          requests: {cpu: 100m, memory: 128Mi}
          limits: {memory: 256Mi}
---
# Source: %[1]s/templates/pdb.yaml
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  maxUnavailable: 1
  selector:
    matchLabels: {app.kubernetes.io/name: %[1]s}
---
# Source: %[1]s/templates/configmap.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: %[1]s
  namespace: %[2]s
data:
  config.yaml: |
    server:
      port: 8080
`, app, ns, 1+i%4)
	}
	return b.Bytes()
}

// BenchmarkCheck10k measures the whole command (parse, analyse, render JSON)
// over 10,000 documents on stdin and reports documents per second.
func BenchmarkCheck10k(b *testing.B) {
	input := manifest10k()
	if n := bytes.Count(input, []byte("\n---\n")) + 1; n != 10000 {
		b.Fatalf("generated %d documents", n)
	}
	// Every flag given here is one changed from `zerodrop check`'s
	// defaults ("-", stdin, is the input): the line every bench prints
	// beside its figures (internal/bench.FlagsLine).
	args := []string{"-o", "json", "-"}
	fmt.Printf("flags changed from the shipped defaults: %s\n", strings.Join(args[:len(args)-1], " "))
	b.SetBytes(int64(len(input)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		code := check.Run(context.Background(), args, bytes.NewReader(input), io.Discard, io.Discard)
		if code != check.ExitFindings {
			b.Fatalf("exit %d", code)
		}
	}
	b.ReportMetric(float64(10000*b.N)/b.Elapsed().Seconds(), "docs/s")
	// docs/s is wall time, which on a shared machine depends on everything
	// else running; the process's CPU time per document does not, so it is
	// reported beside it (user + system, every thread, GC included).
	if cpu := cpuTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(10000*b.N)/cpu.Seconds(), "docs/cpu-s")
	}
}

// cpuTime is the CPU time the process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestBenchmarkInputIsAnalysed keeps the benchmark honest: its input must
// parse cleanly and give findings on every workload (no timing asserts).
func TestBenchmarkInputIsAnalysed(t *testing.T) {
	r := run(t, string(manifest10k()), "-")
	if r.code != check.ExitFindings || r.stderr != "" {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "(2500 workloads selected by 2500 LoadBalancer Services, provider generic)") {
		t.Fatalf("summary: %s", r.stdout[strings.LastIndex(r.stdout, "zerodrop check:"):])
	}
}
