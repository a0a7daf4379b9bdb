package rules_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/check/rules"
)

// TestAppShutdownDelay: a shutdown delay the server declares counts as a
// pre-stop delay — alone (no ZD201; ZD202 when short of the generic 35 s
// deregistration) and added to a preStop sleep — only for the server whose
// image the container runs.
func TestAppShutdownDelay(t *testing.T) {
	run := func(image string, args ...string) func(f *fixture) {
		return func(f *fixture) {
			f.container().Image, f.container().Args = image, args
			f.container().Lifecycle = nil
		}
	}
	env := func(k, v string) func(f *fixture) {
		return func(f *fixture) { f.container().Env = append(f.container().Env, corev1.EnvVar{Name: k, Value: v}) }
	}
	const agnhost = "registry.k8s.io/e2e-test-images/agnhost:2.53"
	const nginx = "registry.k8s.io/ingress-nginx/controller:v1.12.0"
	cases := []struct {
		name   string
		mutate func(f *fixture)
		rule   string // the one of ZD201/ZD202/ZD203 that fires, "" none
		msg    string
	}{
		{"agnhost netexec without delay", run(agnhost, "netexec", "--http-port=8080"), "ZD201", ""},
		{"agnhost --delay-shutdown=40", run(agnhost, "netexec", "--http-port=8080", "--delay-shutdown=40"), "", ""},
		{"agnhost --delay-shutdown 30", run(agnhost, "netexec", "--delay-shutdown", "30"), "ZD202", "agnhost --delay-shutdown 30"},
		{"agnhost delay plus a preStop sleep", all(run(agnhost, "netexec", "--delay-shutdown=20"), sleepAction(20)), "", ""},
		{"agnhost delay beyond the grace period", run(agnhost, "netexec", "--delay-shutdown=60"), "ZD203", ""},
		{"the flag on another image", run("example.com/web:1", "--delay-shutdown=40"), "ZD201", ""},
		{"ingress-nginx --shutdown-grace-period", run(nginx, "/nginx-ingress-controller", "--shutdown-grace-period=40"), "", ""},
		{"traefik requestAcceptGraceTimeout flag", run("traefik:v3.3", "--entryPoints.web.transport.lifeCycle.requestAcceptGraceTimeout=40s"), "", ""},
		{"traefik the shortest entry point counts", run("traefik:v3.3", "--entryPoints.web.transport.lifeCycle.requestAcceptGraceTimeout=40s",
			"--entrypoints.websecure.transport.lifecycle.requestacceptgracetimeout=10"), "ZD202", "10 s"},
		{"traefik environment variable", all(run("traefik:v3.3"), env("TRAEFIK_ENTRYPOINTS_WEB_TRANSPORT_LIFECYCLE_REQUESTACCEPTGRACETIMEOUT", "40s")), "", ""},
		{"unreadable value", run(agnhost, "netexec", "--delay-shutdown=forty"), "ZD201", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			tc.mutate(f)
			rep := f.analyze()
			for _, id := range []string{"ZD201", "ZD202", "ZD203"} {
				i := slices.IndexFunc(rep.Findings, func(fd rules.Finding) bool { return fd.Rule == id })
				if (i >= 0) != (id == tc.rule) {
					t.Fatalf("%s fires = %v, want only %q; findings:\n%s", id, i >= 0, tc.rule, dump(rep.Findings))
				}
				if i >= 0 && !strings.Contains(rep.Findings[i].Message, tc.msg) {
					t.Errorf("%s message %q does not contain %q", id, rep.Findings[i].Message, tc.msg)
				}
			}
		})
	}
}
