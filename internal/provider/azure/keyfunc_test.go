package azure_test

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/azure"
)

func svc(ns, name string, annotations map[string]string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations}}
}

// TestKeyFunc: the annotation wins when valid; otherwise a Service stays
// where its frontend is, and new Services spread by rendezvous hashing.
func TestKeyFunc(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	p := newProvider(t, emu, provider.Hooks{}, "lb-a", "lb-b")
	count := map[string]int{}
	for i := 0; i < 200; i++ {
		count[p.KeyFunc(svc("default", fmt.Sprintf("s%d", i), nil))]++
	}
	if count["lb-a"] < 70 || count["lb-b"] < 70 {
		t.Errorf("spread = %v, want both load balancers used", count)
	}
	if got := p.KeyFunc(svc("default", "web", map[string]string{azure.AnnotationLoadBalancer: "lb-b"})); got != "lb-b" {
		t.Errorf("annotated: %s, want lb-b", got)
	}

	// Place "web" against its hash, then ask again without (or with a bad)
	// annotation from a fresh provider: it stays.
	hashed := p.KeyFunc(svc("default", "web", nil))
	other := map[string]string{"lb-a": "lb-b", "lb-b": "lb-a"}[hashed]
	converge(t, p, &model.LoadBalancer{Key: other, Listeners: []model.Listener{listener("default", "web", 80)}})
	fresh := newProvider(t, emu, provider.Hooks{}, "lb-a", "lb-b", "lb-c")
	for _, ann := range []map[string]string{nil, {azure.AnnotationLoadBalancer: "lb-typo"}} {
		if got := fresh.KeyFunc(svc("default", "web", ann)); got != other {
			t.Errorf("annotations %v: %s, want %s where the frontend is", ann, got, other)
		}
	}
}

func TestValidateService(t *testing.T) {
	p := newProvider(t, azurearm.New(azurearm.Options{}), provider.Hooks{}, "lb-a")
	var invalid *model.InvalidConfigError
	if err := p.ValidateService(svc("default", "web", map[string]string{azure.AnnotationLoadBalancer: "nope"})); !errors.As(err, &invalid) {
		t.Errorf("unknown load balancer: %v, want InvalidConfigError", err)
	}
	for _, ann := range []map[string]string{nil, {azure.AnnotationLoadBalancer: "lb-a"}} {
		if err := p.ValidateService(svc("default", "web", ann)); err != nil {
			t.Errorf("%v: %v", ann, err)
		}
	}
}
