package webhook_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/webhook"
)

// TestDeploymentArgs parses the Deployment's arguments with the
// controller's and the webhook's flags, so a renamed flag breaks this test
// rather than the rollout. It is an external test package: the controller
// command imports this package once it wires the webhook.
func TestDeploymentArgs(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(data, &d); err != nil {
		t.Fatalf("deployment.yaml: %v", err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "controller" {
		t.Fatalf("args %q, want the controller subcommand first", c.Args)
	}
	args := make([]string, 0, len(c.Args)-1)
	for _, a := range c.Args[1:] {
		args = append(args, strings.ReplaceAll(a, "$(POD_NAMESPACE)", "zerodrop-system"))
	}
	cfg, err := controller.ParseArgs(args)
	if err != nil {
		t.Fatalf("deployment args %q: %v", args, err)
	}
	if !cfg.Webhook.Enabled || cfg.Webhook.Certs.Namespace != "zerodrop-system" {
		t.Errorf("the Deployment must enable the webhook in its own namespace")
	}
	if cfg.LeaderNamespace != "zerodrop-system" || cfg.LeaderID != "zerodrop-controller" {
		t.Errorf("leader election in %s/%s; the Role grants zerodrop-system/zerodrop-controller", cfg.LeaderNamespace, cfg.LeaderID)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the Deployment's flags are refused: %v", err)
	}
	// The injected hooks call --webhook-drain-host: the drain Service must
	// sit at that fixed address, which a reinstall keeps.
	data, err = os.ReadFile(filepath.Join(root, "deploy", "services.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var svc corev1.Service
		if err := yaml.UnmarshalStrict([]byte(doc), &svc); err != nil {
			t.Fatalf("services.yaml: %v", err)
		}
		if svc.Name != webhook.DefaultDrainServiceName {
			continue
		}
		found = true
		if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP != cfg.Webhook.DrainHost {
			t.Errorf("Service %s has clusterIP %q, the controller --webhook-drain-host %q: want the same fixed address",
				svc.Name, svc.Spec.ClusterIP, cfg.Webhook.DrainHost)
		}
		if port := svc.Spec.Ports[0].Port; port != cfg.Webhook.DrainPort {
			t.Errorf("Service %s port %d, the controller --webhook-drain-port %d", svc.Name, port, cfg.Webhook.DrainPort)
		}
	}
	if !found {
		t.Errorf("services.yaml has no Service %s", webhook.DefaultDrainServiceName)
	}
}
