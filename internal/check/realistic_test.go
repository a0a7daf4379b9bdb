package check_test

import (
	"slices"
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/check"
)

// TestRealisticManifests runs the analyzer over manifests shaped like what
// people deploy (an ingress-nginx controller, a `helm create` chart, a
// kustomized podinfo, a well-configured service) and checks that the
// findings are the ones a reviewer would raise, and only those.
func TestRealisticManifests(t *testing.T) {
	type want map[string][]string // object -> rule IDs
	tests := []struct {
		provider string
		code     int
		want     want
	}{
		{"generic", check.ExitFindings, want{
			// preStop /wait-shutdown quits nginx gracefully but does not
			// wait for the load balancer; Local (the node enters the load
			// balancer only once its health check sees the pod) without
			// spreading; one replica (the default 25% resolves to 0).
			"Deployment/ingress-nginx/ingress-nginx-controller": {"ZD103", "ZD104", "ZD201", "ZD303", "ZD304", "ZD401"},
			// helm create: identical probes, no preStop, one replica; the
			// chart's test Pod (a helm.sh/hook) is not reported. Cluster
			// on a node-backed load balancer: no registration to gate.
			"Deployment/default/shop-web": {"ZD102", "ZD201", "ZD303", "ZD304"},
			// podinfo: HPA minReplicas 2 and maxUnavailable 0 are fine.
			"Deployment/podinfo/podinfo": {"ZD201", "ZD304"},
			// Sleeps 20 s: enough for Azure, not for the conservative generic 35 s.
			"Deployment/store/api": {"ZD202"},
		}},
		{"azure", check.ExitFindings, want{
			"Deployment/ingress-nginx/ingress-nginx-controller": {"ZD103", "ZD104", "ZD201", "ZD303", "ZD304", "ZD401"},
			"Deployment/default/shop-web":                       {"ZD102", "ZD201", "ZD303", "ZD304"},
			"Deployment/podinfo/podinfo":                        {"ZD201", "ZD304"},
		}},
		{"aws", check.ExitFindings, want{
			"Deployment/ingress-nginx/ingress-nginx-controller": {"ZD103", "ZD104", "ZD201", "ZD303", "ZD304", "ZD401"},
			"Deployment/default/shop-web":                       {"ZD102", "ZD201", "ZD303", "ZD304"},
			"Deployment/podinfo/podinfo":                        {"ZD201", "ZD304"},
			// 20 s against the NLB's 300 s deregistration delay.
			"Deployment/store/api": {"ZD202"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.provider, func(t *testing.T) {
			r := run(t, "", "-o", "json", "--provider", tc.provider, "testdata/realistic")
			if r.code != tc.code || r.stderr != "" {
				t.Fatalf("exit %d, want %d; stderr: %s", r.code, tc.code, r.stderr)
			}
			got := want{}
			for _, f := range decodeFindings(t, r.stdout) {
				obj := f["object"].(string)
				got[obj] = append(got[obj], f["rule"].(string))
			}
			for obj := range got {
				slices.Sort(got[obj])
				got[obj] = slices.Compact(got[obj])
			}
			for obj, rules := range tc.want {
				if !slices.Equal(got[obj], rules) {
					t.Errorf("%s: rules %v, want %v", obj, got[obj], rules)
				}
			}
			for obj := range got {
				if _, ok := tc.want[obj]; !ok {
					t.Errorf("unexpected findings on %s: %v", obj, got[obj])
				}
			}
		})
	}
}

func TestRealisticTextOutputIsReadable(t *testing.T) {
	r := run(t, "", "--provider", "azure", "testdata/realistic/ingress-nginx.yaml")
	for _, want := range []string{
		"Deployment/ingress-nginx/ingress-nginx-controller  testdata/realistic/ingress-nginx.yaml:72",
		`preStop exec "/wait-shutdown", which is not a recognised delay`,
		"fix: add lifecycle.preStop.sleep.seconds: 15",
		"zerodrop check: 1 error, 5 warnings (1 workload selected by 1 LoadBalancer Service, provider azure)",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
}
