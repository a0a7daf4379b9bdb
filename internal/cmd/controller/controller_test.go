package controller

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

const (
	testSub    = "00000000-0000-0000-0000-0000000000aa"
	testSubnet = "/subscriptions/" + testSub + "/resourceGroups/rg-net/providers/Microsoft.Network/virtualNetworks/vnet/subnets/lb"
)

// azureArgs is a complete, valid --provider azure command line with one
// flag replaced or dropped (value "-").
func azureArgs(override map[string]string) []string {
	flags := map[string]string{
		"provider":              "azure",
		"azure-subscription-id": testSub,
		"azure-resource-group":  "rg-cluster",
		"azure-load-balancers":  "kubernetes,kubernetes-2",
		"azure-subnet-id":       testSubnet,
		"azure-location":        "westeurope",
	}
	for k, v := range override {
		flags[k] = v
	}
	var args []string
	for k, v := range flags {
		if v != "-" {
			args = append(args, "--"+k+"="+v)
		}
	}
	return args
}

func parse(t *testing.T, args []string) Config {
	t.Helper()
	cfg, err := ParseArgs(args)
	if err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return cfg
}

func TestValidate(t *testing.T) {
	// The subscription flag defaults to the environment's.
	t.Setenv("AZURE_SUBSCRIPTION_ID", "")
	cases := []struct {
		desc string
		args []string
		want string // "" means valid; otherwise a substring of the error
	}{
		{"haproxy defaults", nil, ""},
		{"azure complete", azureArgs(nil), ""},
		{"azure one load balancer, china", azureArgs(map[string]string{"azure-load-balancers": "lb", "azure-cloud": "china"}), ""},
		{"unknown provider", []string{"--provider=gcp"}, `--provider "gcp" is not supported`},
		{"aws: budget not positive", []string{"--provider=aws", "--aws-qps=0"}, "--aws-qps 0"},
		{"aws: endpoint not a URL", []string{"--provider=aws", "--aws-endpoint=emulator"}, "--aws-endpoint"},
		{"json logs", []string{"--log-format=json"}, ""},
		{"unknown log format", []string{"--log-format=xml"}, `--log-format must be text or json, not "xml"`},
		{"azure without anything", []string{"--provider=azure"}, "--azure-subscription-id (or $AZURE_SUBSCRIPTION_ID) is required"},
		{"no subscription", azureArgs(map[string]string{"azure-subscription-id": "-"}), "--azure-subscription-id"},
		{"subscription not a GUID", azureArgs(map[string]string{"azure-subscription-id": "my-sub"}), `"my-sub" is not a subscription ID`},
		{"no resource group", azureArgs(map[string]string{"azure-resource-group": "-"}), "--azure-resource-group is required"},
		{"resource group ends in a dot", azureArgs(map[string]string{"azure-resource-group": "rg."}), "not a resource group name"},
		{"no load balancers", azureArgs(map[string]string{"azure-load-balancers": " , "}), "at least one load balancer"},
		{"load balancer named twice", azureArgs(map[string]string{"azure-load-balancers": "lb-a,LB-A"}), `names "LB-A" twice`},
		{"bad load balancer name", azureArgs(map[string]string{"azure-load-balancers": "lb/a"}), `"lb/a" is not a load balancer name`},
		{"no subnet", azureArgs(map[string]string{"azure-subnet-id": "-"}), "--azure-subnet-id is required"},
		{"subnet is a vnet", azureArgs(map[string]string{"azure-subnet-id": strings.TrimSuffix(testSubnet, "/subnets/lb")}), "is not /subscriptions/"},
		{"no location", azureArgs(map[string]string{"azure-location": "-"}), "--azure-location is required"},
		{"empty owner", azureArgs(map[string]string{"azure-owner": ""}), "--azure-owner"},
		{"unknown cloud", azureArgs(map[string]string{"azure-cloud": "mars"}), `--azure-cloud "mars"`},
		{"haproxy read limit", []string{"--haproxy-read-qps=200", "--haproxy-read-burst=50"}, ""},
		{"negative haproxy read limit", []string{"--haproxy-read-qps=-1"}, "--haproxy-read-qps"},
		{"negative azure read burst", azureArgs(map[string]string{"azure-read-burst": "-5"}), "--azure-read-burst"},
		{"bad sync", []string{"--sync=sometimes"}, "--sync"},
		{"bad address pool", []string{"--address-pool=10.0.0.0"}, "--address-pool"},
		{"kube-proxy healthz port off", []string{"--kube-proxy-healthz-port=0"}, ""},
		{"kube-proxy healthz port out of range", []string{"--kube-proxy-healthz-port=70000"}, "--kube-proxy-healthz-port"},
		{"no check caps", []string{"--max-ports-per-service=0", "--service-check-limit=0", "--node-check-budget=0"}, ""},
		{"negative port cap", []string{"--max-ports-per-service=-1"}, "max ports per Service -1"},
		{"negative check budget", []string{"--node-check-budget=-5"}, "--node-check-budget"},
		{"check limit not a number", []string{"--service-check-limit=NaN"}, "checks per second per Service NaN"},
		{"webhook with its drain address", []string{"--webhook", "--webhook-drain-host=10.96.0.90"}, ""},
		{"webhook without a drain address", []string{"--webhook"}, "--webhook-drain-host"},
		{"webhook drain address is a name", []string{"--webhook", "--webhook-drain-host=zerodrop-drain.zerodrop-system.svc"}, "not an IP address"},
		{"webhook drain address is loopback", []string{"--webhook", "--webhook-drain-host=127.0.0.1"}, "--webhook-drain-host"},
		{"webhook drain address unspecified", []string{"--webhook", "--webhook-drain-host=::"}, "--webhook-drain-host"},
		{"role all", []string{"--role=all"}, ""},
		{"unknown role", []string{"--role=writer"}, "--role must be all, control or data-plane"},
		{"data-plane role", []string{"--role=data-plane", "--pod-name=dp-x", "--pod-namespace=zerodrop", "--pod-uid=0b5c"}, ""},
		{"data-plane role without its pod", []string{"--role=data-plane"}, "--pod-uid"},
		{"data-plane role serving the webhook", []string{"--role=data-plane", "--webhook", "--webhook-drain-host=10.96.0.90"}, "does not serve the webhook"},
		{"data-plane role without a state endpoint", []string{"--role=data-plane", "--state-bind-address=0"}, "--state-bind-address"},
		{"data-plane role, azure", append(azureArgs(nil), "--role=data-plane"), "HAProxy's"},
		{"control role", []string{"--role=control", "--data-plane-namespace=zerodrop", "--data-plane-selector=app.kubernetes.io/component=data-plane"}, ""},
		{"control role without its replicas", []string{"--role=control"}, "--data-plane-namespace and --data-plane-selector"},
		{"control role, bad selector", []string{"--role=control", "--data-plane-namespace=zerodrop", "--data-plane-selector=a b"}, "--data-plane-selector"},
		{"control role, bad read timeout", []string{"--role=control", "--data-plane-namespace=zerodrop", "--data-plane-selector=a=b", "--data-plane-read-timeout=-1s"}, "--data-plane-read-timeout"},
		{"control role, bad state port", []string{"--role=control", "--data-plane-namespace=zerodrop", "--data-plane-selector=a=b", "--data-plane-state-port=0"}, "--data-plane-state-port"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := parse(t, tc.args)
			err := cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid flags refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted, want an error with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestValidateListsEveryProblem: one run names every bad Azure flag, not
// only the first.
func TestValidateListsEveryProblem(t *testing.T) {
	t.Setenv("AZURE_SUBSCRIPTION_ID", "")
	cfg := parse(t, []string{"--provider=azure"})
	err := cfg.Validate()
	for _, flag := range []string{"--azure-subscription-id", "--azure-resource-group", "--azure-load-balancers", "--azure-subnet-id", "--azure-location"} {
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("error %v does not name %s", err, flag)
		}
	}
}

// TestRunRefusesBadFlagsBeforeConnecting: a usage error is exit 2 and comes
// before the kubeconfig is read (which here would fail with exit 1).
func TestRunRefusesBadFlagsBeforeConnecting(t *testing.T) {
	t.Setenv("AZURE_SUBSCRIPTION_ID", "")
	missing := filepath.Join(t.TempDir(), "no-kubeconfig")
	var stderr bytes.Buffer
	args := append(azureArgs(map[string]string{"azure-location": "-"}), "--kubeconfig="+missing)
	if code := Run(context.Background(), args, io.Discard, &stderr); code != 2 {
		t.Fatalf("exit %d, want 2; stderr: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "--azure-location is required") || strings.Contains(stderr.String(), "kubeconfig") {
		t.Fatalf("stderr does not name the flag only: %s", stderr.String())
	}
	// The same command line with the flag is valid and gets as far as the
	// kubeconfig: the exit-2 path above is the validation, nothing else.
	stderr.Reset()
	args = append(azureArgs(nil), "--kubeconfig="+missing, "--metrics-bind-address=0", "--health-probe-bind-address=0", "--drain-bind-address=0")
	if code := Run(context.Background(), args, io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), "kubeconfig") {
		t.Fatalf("exit %d, want 1 with a kubeconfig error; stderr: %s", code, stderr.String())
	}
}

// TestHelpHidesKlogFlags: --help lists the controller's flags and not
// klog's, which still parse (-v=2 is accepted: the run below fails only at
// validation, on the provider).
func TestHelpHidesKlogFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Run(context.Background(), []string{"--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("--help exited %d: %s", code, stderr.String())
	}
	help := stderr.String()
	for _, want := range []string{"--kubeconfig", "--provider", "--log-format", "--azure-subscription-id", "--webhook"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %s:\n%s", want, help)
		}
	}
	for _, klogFlag := range []string{"--vmodule", "--logtostderr", "--skip_headers", "-v, --v"} {
		if strings.Contains(help, klogFlag) {
			t.Errorf("--help shows klog's %s:\n%s", klogFlag, help)
		}
	}
	stderr.Reset()
	code := Run(context.Background(), []string{"-v=2", "--vmodule=reconcile=4", "--provider=gcp"}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), `--provider "gcp" is not supported`) {
		t.Errorf("klog flags with a bad provider: exit %d, %q; want 2 and the provider's message", code, stderr.String())
	}
	stderr.Reset()
	if code := Run(context.Background(), []string{"--no-such-flag"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "no-such-flag") {
		t.Errorf("unknown flag: exit %d, %q; want 2 naming the flag", code, stderr.String())
	}
}

// TestReadLimitPerProvider: the Service controller's read limit is the
// configured provider's flags, each with its own default, and a zero
// (a Config built in code) is that default.
func TestReadLimitPerProvider(t *testing.T) {
	cases := []struct {
		desc string
		args []string
		want ReadLimit
	}{
		{"haproxy default", nil, DefaultHAProxyRead},
		{"azure default", azureArgs(nil), DefaultAzureRead},
		{"haproxy flags", []string{"--haproxy-read-qps=200", "--haproxy-read-burst=50", "--azure-read-qps=1"}, ReadLimit{QPS: 200, Burst: 50}},
		{"azure flags", azureArgs(map[string]string{"azure-read-qps": "2.5", "azure-read-burst": "7", "haproxy-read-qps": "1"}), ReadLimit{QPS: 2.5, Burst: 7}},
		{"azure zero is the default", azureArgs(map[string]string{"azure-read-qps": "0"}), ReadLimit{QPS: DefaultAzureRead.QPS, Burst: DefaultAzureRead.Burst}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := parse(t, tc.args)
			if got := cfg.readLimit(); got != tc.want {
				t.Fatalf("read limit %+v, want %+v", got, tc.want)
			}
		})
	}
	if got := (&Config{Provider: "haproxy"}).readLimit(); got != DefaultHAProxyRead {
		t.Fatalf("a Config built in code: read limit %+v, want the default %+v", got, DefaultHAProxyRead)
	}
	// The published ARM limits the Azure default stays under (readlimit.go).
	if d := DefaultAzureRead; d.QPS > 25 || d.Burst > 250 {
		t.Fatalf("azure default %+v exceeds ARM's read bucket (250, refilled at 25 a second)", d)
	}
}
