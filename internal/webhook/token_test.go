package webhook

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/drainrelay"
)

// With a drain key, the pod's token (derived from the key and the pod's
// name) goes in the hook's header and in the relay's environment, and in
// nothing else: the direct hook (no relay) gets none, and a second run on
// the webhook's output changes nothing.
func TestMutateGivesTheRelayThePodsToken(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	d := relayAt
	d.Key = key
	pod := webPod()
	if res := Mutate(pod, "shop", Selecting(pod, []corev1.Service{byNumber}, Filter{}), d, fixedName); !res.RelayAdded {
		t.Fatalf("relay not added: %+v", res)
	}
	want := drain.PodToken(key, "shop", pod.Name)
	hook := pod.Spec.Containers[0].Lifecycle.PreStop.HTTPGet
	if len(hook.HTTPHeaders) != 1 || hook.HTTPHeaders[0] != (corev1.HTTPHeader{Name: drainrelay.TokenHeader, Value: want}) {
		t.Errorf("hook headers %v, want %s: the pod's token", hook.HTTPHeaders, drainrelay.TokenHeader)
	}
	relay := pod.Spec.InitContainers[0]
	var got []string
	for _, e := range relay.Env {
		if e.Name == drainrelay.TokenEnv {
			got = append(got, e.Value)
		}
	}
	if len(got) != 1 || got[0] != want {
		t.Errorf("relay env %s = %v, want the pod's token once", drainrelay.TokenEnv, got)
	}
	again := pod.DeepCopy()
	if r := Mutate(again, "shop", Selecting(again, []corev1.Service{byNumber}, Filter{}), d, fixedName); r.Changed() || !equality.Semantic.DeepEqual(again, pod) {
		t.Errorf("second run changed the pod: %+v", r)
	}
	direct := webPod(func(p *corev1.Pod) { p.Spec.HostNetwork = true })
	Mutate(direct, "shop", Selecting(direct, []corev1.Service{byNumber}, Filter{}), d, fixedName)
	if h := direct.Spec.Containers[0].Lifecycle.PreStop.HTTPGet; len(h.HTTPHeaders) != 0 || len(direct.Spec.InitContainers) != 0 {
		t.Errorf("direct hook got headers %v and %d init containers, want neither: the token is the relay's", h.HTTPHeaders, len(direct.Spec.InitContainers))
	}
}
