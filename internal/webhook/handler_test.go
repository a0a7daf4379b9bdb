package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func podRequest(t *testing.T, ns string, pod *corev1.Pod, dryRun bool) admission.Request {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "u1", Operation: admissionv1.Create, Namespace: ns,
		Kind:   metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Object: runtime.RawExtension{Raw: raw}, DryRun: ptr.To(dryRun),
	}}
}

func newHandler(rec events.EventRecorder, objs ...runtime.Object) *Handler {
	return &Handler{
		Reader:    fake.NewClientBuilder().WithRuntimeObjects(objs...).Build(),
		Decoder:   admission.NewDecoder(scheme.Scheme),
		Recorder:  rec,
		DrainHost: "10.0.0.9",
		DrainPort: DefaultDrainPort,
		NewName:   fixedName,
		Logger:    stderrLogger(),
	}
}

// TestHandler covers what the real-apiserver test cannot reach: the
// handler's own namespace check (the apiserver filters first), a missing
// drain Service, undecodable input, and dry runs.
func TestHandler(t *testing.T) {
	labelled := namespace("shop", map[string]string{LabelInject: InjectEnabled})
	ctx := context.Background()

	t.Run("namespace without the label: allowed, no patch", func(t *testing.T) {
		h := newHandler(nil, namespace("shop", nil), zerodropService("shop"))
		resp := h.Handle(ctx, podRequest(t, "shop", webPodIn("shop"), false))
		if !resp.Allowed || len(resp.Patches) != 0 {
			t.Errorf("want allowed without patches, got %+v", resp)
		}
	})

	t.Run("labelled namespace: patched with gate, hook and name", func(t *testing.T) {
		h := newHandler(nil, labelled, zerodropService("shop"))
		resp := h.Handle(ctx, podRequest(t, "shop", webPodIn("shop"), false))
		if !resp.Allowed || len(resp.Patches) == 0 {
			t.Fatalf("want a patch, got %+v", resp)
		}
		paths := map[string]bool{}
		for _, p := range resp.Patches {
			paths[p.Path] = true
		}
		for _, want := range []string{"/metadata/name", "/spec/readinessGates", "/spec/containers/0/lifecycle"} {
			if !paths[want] {
				t.Errorf("no patch of %s in %+v", want, resp.Patches)
			}
		}
	})

	t.Run("the hook calls the configured address, not the drain Service's current one", func(t *testing.T) {
		moved := drainService()
		moved.Spec.ClusterIP = "10.0.0.77"
		h := newHandler(nil, labelled, zerodropService("shop"), moved)
		resp := h.Handle(ctx, podRequest(t, "shop", webPodIn("shop"), false))
		raw, _ := json.Marshal(resp.Patches)
		if !strings.Contains(string(raw), `"host":"10.0.0.9"`) {
			t.Errorf("patches %s do not call the configured drain host 10.0.0.9", raw)
		}
	})

	t.Run("no drain host configured: gate only, with a warning", func(t *testing.T) {
		h := newHandler(nil, labelled, zerodropService("shop"), drainService())
		h.DrainHost = ""
		resp := h.Handle(ctx, podRequest(t, "shop", webPodIn("shop"), false))
		if !resp.Allowed || len(resp.Patches) != 1 || resp.Patches[0].Path != "/spec/readinessGates" {
			t.Errorf("want only the readiness gate patched, got %+v", resp.Patches)
		}
		if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "no drain host configured") {
			t.Errorf("warnings %q", resp.Warnings)
		}
	})

	t.Run("undecodable pod: allowed, never denied", func(t *testing.T) {
		h := newHandler(nil, labelled)
		req := podRequest(t, "shop", webPodIn("shop"), false)
		req.Object.Raw = []byte(`{"spec": 7}`)
		resp := h.Handle(ctx, req)
		if !resp.Allowed || len(resp.Warnings) != 1 {
			t.Errorf("want allowed with a warning, got %+v", resp)
		}
	})

	t.Run("namespace unreadable: allowed, never denied", func(t *testing.T) {
		h := newHandler(nil)
		resp := h.Handle(ctx, podRequest(t, "shop", webPodIn("shop"), false))
		if !resp.Allowed || len(resp.Patches) != 0 || len(resp.Warnings) != 1 {
			t.Errorf("want allowed with a warning, got %+v", resp)
		}
	})

	t.Run("kept preStop: Event on a real request, none on a dry run", func(t *testing.T) {
		rec := events.NewFakeRecorder(10)
		h := newHandler(rec, labelled, zerodropService("shop"))
		own := webPodIn("shop", func(p *corev1.Pod) {
			p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}}
		})
		if resp := h.Handle(ctx, podRequest(t, "shop", own, true)); len(resp.Warnings) != 1 {
			t.Errorf("dry run: warnings %q, want one", resp.Warnings)
		}
		if len(rec.Events) != 0 {
			t.Errorf("dry run recorded an Event: %s", <-rec.Events)
		}
		h.Handle(ctx, podRequest(t, "shop", own, false))
		select {
		case ev := <-rec.Events:
			if !strings.Contains(ev, ReasonPreStopHookExists) {
				t.Errorf("Event %q, want reason %s", ev, ReasonPreStopHookExists)
			}
		default:
			t.Errorf("no Event recorded")
		}
	})
}
