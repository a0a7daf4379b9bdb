package webhook

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Handler is the mutating admission handler for pods. It never denies: any
// failure admits the pod unchanged with a warning, because a webhook error
// response is a rejection (failurePolicy covers only unreachable webhooks),
// and losing the gates is better than losing the pod.
type Handler struct {
	// Reader reads Namespaces and Services (the manager's cache).
	Reader  client.Reader
	Decoder admission.Decoder
	// Recorder, when set, records PreStopHookExists on the Service.
	Recorder events.EventRecorder
	// Filter picks zerodrop's Services.
	Filter Filter
	// DrainHost and DrainPort are where the hook calls the drain endpoint:
	// the drain Service's fixed clusterIP and port. Without a host only the
	// readiness gate is added, with a warning.
	DrainHost string
	DrainPort int32
	// DrainRelay, when set, injects the drain relay sidecar and points the
	// hook at it (Relay).
	DrainRelay *Relay
	// DrainKey gives each relay its token (Drain.Key).
	DrainKey []byte
	// NewName names generateName pods (default GenerateName).
	NewName NameFunc
	Logger  logr.Logger
}

var _ admission.Handler = (*Handler)(nil)

// Handle admits a pod, with zerodrop's gates when it qualifies.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.SubResource != "" || req.Kind.Kind != "Pod" {
		return admission.Allowed("not a pod creation")
	}
	log := h.Logger.WithValues("namespace", req.Namespace, "uid", req.UID)
	pod := &corev1.Pod{}
	if err := h.Decoder.Decode(req, pod); err != nil {
		log.Error(err, "decode pod")
		return allowedWithWarning(fmt.Sprintf("zerodrop: pod not decoded, gates not injected: %v", err))
	}
	if OptedOut(pod) {
		return admission.Allowed("opted out by annotation " + AnnotationInject)
	}
	// The webhook configuration's namespaceSelector already filters; this
	// second look covers a configuration edited by hand.
	ns := &corev1.Namespace{}
	if err := h.Reader.Get(ctx, types.NamespacedName{Name: req.Namespace}, ns); err != nil {
		log.Error(err, "read namespace")
		return allowedWithWarning(fmt.Sprintf("zerodrop: namespace %s not read, gates not injected: %v", req.Namespace, err))
	}
	if ns.Labels[LabelInject] != InjectEnabled {
		return admission.Allowed("namespace not labelled " + LabelInject + "=" + InjectEnabled)
	}
	var services corev1.ServiceList
	if err := h.Reader.List(ctx, &services, client.InNamespace(req.Namespace)); err != nil {
		log.Error(err, "list services")
		return allowedWithWarning(fmt.Sprintf("zerodrop: services not listed, gates not injected: %v", err))
	}
	selecting := Selecting(pod, services.Items, h.Filter)
	if len(selecting) == 0 {
		return admission.Allowed("no zerodrop Service selects the pod")
	}

	var warnings []string
	if h.DrainHost == "" {
		warnings = append(warnings, "zerodrop: no drain host configured (--webhook-drain-host); readiness gate only, no drain hook")
	}
	mutated := pod.DeepCopy()
	newName := h.NewName
	if newName == nil {
		newName = GenerateName
	}
	res := Mutate(mutated, req.Namespace, selecting, Drain{Host: h.DrainHost, Port: h.DrainPort, Relay: h.DrainRelay, Key: h.DrainKey}, newName)
	name := podName(req.Namespace, mutated)
	if len(res.Unhooked) > 0 && h.DrainHost != "" {
		warnings = append(warnings, fmt.Sprintf("zerodrop: pod has no name; containers %v get no drain hook", res.Unhooked))
	}
	if res.NoRelay != "" {
		warnings = append(warnings, "zerodrop: no drain relay ("+res.NoRelay+"): the drain hook calls the drain Service directly, and a call cut by a controller replica's end is not made again")
	}
	for _, k := range res.Kept {
		warnings = append(warnings, fmt.Sprintf(
			"zerodrop: container %q keeps its own preStop hook, so the drain hook is not added: Service %s may still route new connections to it while it stops",
			k.Container, k.Service))
		h.recordKept(req, selecting, k, eventPodName(req.Namespace, mutated))
	}
	log.V(2).Info("pod admitted", "pod", name, "gate", res.GateAdded, "hooked", res.Hooked, "relay", res.RelayAdded, "kept", len(res.Kept), "nameSet", res.NameSet)
	if !res.Changed() {
		return admission.Allowed("nothing to inject").WithWarnings(warnings...)
	}
	raw, err := json.Marshal(mutated)
	if err != nil {
		log.Error(err, "encode pod")
		return allowedWithWarning(fmt.Sprintf("zerodrop: pod not encoded, gates not injected: %v", err))
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw).WithWarnings(warnings...)
}

// podName names the pod in logs, also before it has a name.
func podName(namespace string, pod *corev1.Pod) string {
	if pod.Name != "" {
		return namespace + "/" + pod.Name
	}
	return namespace + "/" + pod.GenerateName + "<generated>"
}

// eventPodName names the pod in an Event: pods of one ReplicaSet share their
// generateName, so their Events on the Service form one series instead of
// one Event per pod.
func eventPodName(namespace string, pod *corev1.Pod) string {
	if pod.GenerateName != "" {
		return namespace + "/" + pod.GenerateName + "*"
	}
	return namespace + "/" + pod.Name
}

func allowedWithWarning(w string) admission.Response {
	return admission.Allowed("").WithWarnings(w)
}

// dryRun reports whether the request must have no side effects: the
// webhook configuration declares sideEffects NoneOnDryRun, so every write
// (an Event) is skipped on a dry run.
func dryRun(req admission.Request) bool { return req.DryRun != nil && *req.DryRun }

// recordKept puts a Warning Event on the Service: the pod does not exist
// yet, so it cannot carry one. A dry run records nothing.
func (h *Handler) recordKept(req admission.Request, selecting []*corev1.Service, k Kept, pod string) {
	if h.Recorder == nil || dryRun(req) {
		return
	}
	for _, svc := range selecting {
		if svc.Namespace+"/"+svc.Name != k.Service {
			continue
		}
		h.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, ReasonPreStopHookExists, "InjectDrainHook",
			"pod %s: container %q keeps its own preStop hook; zerodrop's drain hook was not added, so the pod may stop before the load balancer drained it",
			pod, k.Container)
	}
}
