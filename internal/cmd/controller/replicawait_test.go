package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"zerodrop.dev/zerodrop/internal/controller/service"
)

// TestControlRoleWatchesReplicaPods: the control role's Service controller
// is given the data-plane replicas' namespace and selector, so that a
// replica pod's change looks again at once at the load balancers waiting
// for the replicas (without them only the back-off's cap would).
func TestControlRoleWatchesReplicaPods(t *testing.T) {
	cfg := Config{Provider: "haproxy", AddressMap: ""}
	cfg.DataPlane = RoleConfig{Role: "control", Namespace: "kube-system", Selector: dataPlaneSelector}
	in := &Instance{}
	opts, err := in.serviceOptions(cfg, wiring{}, service.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	want := labels.Set{"app.kubernetes.io/component": "data-plane"}
	if opts.ReplicaNamespace != "kube-system" || opts.ReplicaSelector == nil || !opts.ReplicaSelector.Matches(want) {
		t.Errorf("control role: replica namespace %q, selector %v; want kube-system and %s", opts.ReplicaNamespace, opts.ReplicaSelector, dataPlaneSelector)
	}
	opts, err = in.serviceOptions(cfg, wiring{}, service.RoleDataPlane)
	if err != nil {
		t.Fatal(err)
	}
	if opts.ReplicaSelector != nil {
		t.Errorf("data-plane role: selector %v, want none (it waits for no replica)", opts.ReplicaSelector)
	}
}
