package rules_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/check/manifest"
	"zerodrop.dev/zerodrop/internal/check/rules"
)

// TestZD206 holds the sidecar's resolved stop against the time the pod must
// keep serving: the generic profile's 35 s deregistration (the fixture's grace
// period is 60 s), and the severity by whether the sidecar carries the
// Service's connections (error) or is called by the application (warning).
func TestZD206(t *testing.T) {
	annotate := func(kv ...string) func(f *fixture) {
		return func(f *fixture) {
			m := f.dep.Spec.Template.Annotations
			if m == nil {
				m = map[string]string{}
				f.dep.Spec.Template.Annotations = m
			}
			for i := 0; i+1 < len(kv); i += 2 {
				m[kv[i]] = kv[i+1]
			}
		}
	}
	label := func(k, v string) func(f *fixture) {
		return func(f *fixture) { f.dep.Spec.Template.Labels[k] = v }
	}
	sqlProxy := func(image string, args ...string) func(f *fixture) {
		return func(f *fixture) {
			f.spec().Containers = append(f.spec().Containers, corev1.Container{Name: "cloud-sql-proxy", Image: image, Args: args})
		}
	}
	ns := func(labels, annots map[string]string) func(f *fixture) {
		return func(f *fixture) {
			f.extra = append(f.extra, manifest.Object{Source: manifest.Source{File: "ns.yaml", Line: 1}, Kind: manifest.KindNamespace,
				Obj: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: labels, Annotations: annots}}})
		}
	}
	dapr := annotate("dapr.io/enabled", "true")
	linkerd := annotate("linkerd.io/inject", "enabled")
	istioClassic := all(label("sidecar.istio.io/inject", "true"), annotate("sidecar.istio.io/nativeSidecar", "false"))
	const v2 = "gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.14.1"
	cases := []struct {
		name     string
		mutate   func(f *fixture)
		severity rules.Severity // "" = no finding
		contains string
	}{
		{"no sidecar", nil, "", ""},
		{"dapr default", dapr, rules.Warning, "5 s after the pod starts terminating"},
		{"dapr not enabled", annotate("dapr.io/enabled", "false"), "", ""},
		{"dapr blocked long enough", all(dapr, annotate("dapr.io/block-shutdown-duration", "40s")), "", ""},
		{"dapr blocked too short", all(dapr, annotate("dapr.io/block-shutdown-duration", "10s")), rules.Warning, "10 s after"},
		{"dapr block unreadable", all(dapr, annotate("dapr.io/block-shutdown-duration", "forty")), "", ""},
		{"dapr graceful seconds long enough", all(dapr, annotate("dapr.io/graceful-shutdown-seconds", "50")), "", ""},
		{"dapr graceful -1 is the default", all(dapr, annotate("dapr.io/graceful-shutdown-seconds", "-1")), rules.Warning, "5 s after"},
		{"dapr within a grace period shorter than deregistration", all(dapr, annotate("dapr.io/graceful-shutdown-seconds", "10"),
			func(f *fixture) { f.spec().TerminationGracePeriodSeconds = ptr.To[int64](10) }), "", ""},
		{"linkerd", linkerd, rules.Error, "as soon as the pod starts terminating"},
		{"linkerd wait long enough", all(linkerd, annotate("config.alpha.linkerd.io/proxy-wait-before-exit-seconds", "40")), "", ""},
		{"linkerd wait unreadable", all(linkerd, annotate("config.alpha.linkerd.io/proxy-wait-before-exit-seconds", "40s")), "", ""},
		{"linkerd native", all(linkerd, annotate("config.alpha.linkerd.io/proxy-enable-native-sidecar", "true")), "", ""},
		{"linkerd skips the served port inbound", all(linkerd, annotate("config.linkerd.io/skip-inbound-ports", "4000,8000-9000")), rules.Warning, ""},
		{"linkerd from the namespace", ns(nil, map[string]string{"linkerd.io/inject": "enabled"}), rules.Error, ""},
		{"linkerd disabled on the pod", all(ns(nil, map[string]string{"linkerd.io/inject": "enabled"}), annotate("linkerd.io/inject", "disabled")), "", ""},
		{"istio, native by default", label("sidecar.istio.io/inject", "true"), "", ""},
		{"istio classic", istioClassic, rules.Error, "5 s after"},
		{"istio classic, drain long enough", all(istioClassic, annotate("proxy.istio.io/config", "terminationDrainDuration: 40s\n")), "", ""},
		{"istio classic, exit on zero connections", all(istioClassic, annotate("proxy.istio.io/config", `{"proxyMetadata": {"EXIT_ON_ZERO_ACTIVE_CONNECTIONS": "true"}}`)), "", ""},
		{"istio classic, port excluded inbound", all(istioClassic, annotate("traffic.sidecar.istio.io/excludeInboundPorts", "8080")), rules.Warning, ""},
		{"istio classic from the namespace", all(ns(map[string]string{"istio-injection": "enabled"}, nil), annotate("sidecar.istio.io/nativeSidecar", "false")), rules.Error, ""},
		{"istio disabled on the pod", all(ns(map[string]string{"istio-injection": "enabled"}, nil), annotate("sidecar.istio.io/nativeSidecar", "false"), label("sidecar.istio.io/inject", "false")), "", ""},
		{"cloud sql proxy", sqlProxy(v2), rules.Warning, `container "cloud-sql-proxy" (Cloud SQL Auth Proxy)`},
		{"cloud sql proxy v1", sqlProxy("gcr.io/cloudsql-docker/gce-proxy:1.33.2"), rules.Warning, ""},
		{"cloud sql proxy keeps connections long enough", sqlProxy(v2, "--max-sigterm-delay=40s"), "", ""},
		{"cloud sql proxy keeps connections too short", sqlProxy(v2, "--max-sigterm-delay", "10s"), rules.Warning, "10 s after"},
		{"cloud sql proxy v1 term_timeout", sqlProxy("gcr.io/cloudsql-docker/gce-proxy:1.33.2", "-term_timeout=60s"), "", ""},
		{"cloud sql proxy with a preStop sleep", all(sqlProxy(v2), func(f *fixture) {
			f.spec().Containers[1].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 40}}}
		}), "", ""},
		{"cloud sql proxy as a native sidecar", func(f *fixture) {
			f.spec().InitContainers = append(f.spec().InitContainers, corev1.Container{Name: "cloud-sql-proxy", Image: v2,
				RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)})
		}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			if tc.mutate != nil {
				tc.mutate(f)
			}
			rep := f.analyze()
			i := slices.IndexFunc(rep.Findings, func(fd rules.Finding) bool { return fd.Rule == "ZD206" })
			if (i >= 0) != (tc.severity != "") {
				t.Fatalf("ZD206 fires = %v, want severity %q; findings:\n%s", i >= 0, tc.severity, dump(rep.Findings))
			}
			if i < 0 {
				return
			}
			fd := rep.Findings[i]
			if fd.Severity != tc.severity {
				t.Errorf("severity %s, want %s: %s", fd.Severity, tc.severity, fd.Message)
			}
			if fd.Container != "app" || fd.Fix == "" || len(fd.Explain) == 0 {
				t.Errorf("container %q, fix %q, explain %q", fd.Container, fd.Fix, fd.Explain)
			}
			if !strings.Contains(fd.Message, tc.contains) {
				t.Errorf("message %q does not contain %q", fd.Message, tc.contains)
			}
		})
	}
}
