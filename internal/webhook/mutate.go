package webhook

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/controller/podgate"
	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/drainrelay"
	"zerodrop.dev/zerodrop/internal/model"
)

// Names visible to users.
const (
	// LabelInject=enabled on a Namespace opts its pods in.
	LabelInject = "zerodrop.dev/inject"
	// InjectEnabled is the value of LabelInject that opts a namespace in.
	InjectEnabled = "enabled"
	// AnnotationInject="false" on a pod opts it out.
	AnnotationInject = "zerodrop.dev/inject"
	// ReasonPreStopHookExists is the Event reason on a Service whose pod
	// keeps its own preStop hook instead of the drain hook.
	ReasonPreStopHookExists = "PreStopHookExists"
)

// Filter says which LoadBalancer Services are zerodrop's.
type Filter struct {
	// Classes, when set, are the loadBalancerClasses served (the
	// controller's own); empty means any class with the zerodrop.dev/
	// prefix. A gate for a class no controller serves would keep pods
	// unready for ever.
	Classes []string
	// IncludeClassless also counts Services without a class (the
	// controller's --adopt-classless).
	IncludeClassless bool
	// GateOnly also counts Services annotated zerodrop.dev/gate-only=true,
	// whatever their class: another controller writes their load balancer
	// and zerodrop serves their gates (--azure-gate-only-load-balancers).
	GateOnly bool
}

func (f Filter) class(class *string) bool {
	switch {
	case class == nil:
		return f.IncludeClassless
	case len(f.Classes) > 0:
		return slices.Contains(f.Classes, *class)
	default:
		return strings.HasPrefix(*class, service.ClassPrefix)
	}
}

// Selecting returns the zerodrop Services that select pod: type
// LoadBalancer, a class the filter accepts, not being deleted, and a
// non-empty selector that matches the pod's labels. services are those of
// the pod's namespace.
func Selecting(pod *corev1.Pod, services []corev1.Service, f Filter) []*corev1.Service {
	var out []*corev1.Service
	for i := range services {
		svc := &services[i]
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.DeletionTimestamp != nil || len(svc.Spec.Selector) == 0 {
			continue
		}
		if !f.class(svc.Spec.LoadBalancerClass) && !(f.GateOnly && model.GateOnly(svc.Annotations)) {
			continue
		}
		if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
			out = append(out, svc)
		}
	}
	return out
}

// OptedOut reports whether the pod refuses injection with the annotation
// zerodrop.dev/inject: "false".
func OptedOut(pod *corev1.Pod) bool {
	return strings.EqualFold(pod.Annotations[AnnotationInject], "false")
}

// Drain is where the preStop hook calls the controller's drain endpoint.
type Drain struct {
	// Host is the drain Service's fixed ClusterIP; empty means no hook is
	// added.
	Host string
	Port int32
	// Relay, when set, puts the drain relay in the pod as a native sidecar
	// and points the hook at it instead of at the drain Service.
	Relay *Relay
	// Key is the drain key (drain.EnsureKey). With a relay it gives the
	// pod its token (drain.PodToken), in the hook's header and the relay's
	// environment: the relay then refuses calls without it and trusts only
	// answers proven under it. Empty: no token (the relay checks nothing).
	Key []byte
}

// Relay is the drain relay sidecar (package drainrelay): the hook calls it
// on the pod's own address, and it calls the drain Service again whenever a
// call is cut (the kubelet never retries a hook). It needs native sidecars
// (restartable init containers: Kubernetes 1.29 and later).
type Relay struct {
	// Image is zerodrop's image (`/zerodrop drain-relay`).
	Image string
	// Port is the relay's port in the pod.
	Port int32
}

// RelayContainer is the name of the injected drain relay sidecar.
const RelayContainer = "zerodrop-drain-relay"

// Kept is a serving container whose own preStop hook was left in place.
type Kept struct {
	Container string
	Service   string // namespace/name of a Service it serves
}

// Result says what Mutate changed.
type Result struct {
	GateAdded bool
	// Hooked are the containers that got the drain hook now.
	Hooked []string
	// Kept are the serving containers that keep their own preStop hook.
	Kept []Kept
	// Unhooked are the containers that need the drain hook but did not get
	// it: no drain host is known, or the pod has neither name nor
	// generateName.
	Unhooked []string
	// NameSet is true when the pod's name was chosen from its generateName.
	NameSet bool
	// RelayAdded is true when the drain relay sidecar was added now.
	RelayAdded bool
	// NoRelay says why a pod that gets the hook calls the drain Service
	// directly although a relay is configured.
	NoRelay string
}

// Changed reports whether the pod was modified.
func (r Result) Changed() bool { return r.GateAdded || len(r.Hooked) > 0 || r.NameSet || r.RelayAdded }

// NameFunc picks a pod name from a generateName base.
type NameFunc func(base string) string

// GenerateName is the API server's own scheme: the base cut to 58
// characters plus five random characters from bcdfghjklmnpqrstvwxz2456789.
func GenerateName(base string) string {
	const maxBase = 63 - 5
	if len(base) > maxBase {
		base = base[:maxBase]
	}
	return base + utilrand.String(5)
}

// Mutate adds zerodrop's readiness gate and, to each container that serves a
// target port of a selecting Service and has no preStop hook of its own, the
// drain hook. namespace is the request's (a pod's own metadata may omit it).
// A pod with only a generateName is named here, since the hook must name it
// and the API server names pods only after admission. Mutate is idempotent:
// applied to its own output it changes nothing. With no selecting Service
// or an opt-out annotation the pod is left alone.
func Mutate(pod *corev1.Pod, namespace string, selecting []*corev1.Service, d Drain, newName NameFunc) Result {
	var res Result
	if len(selecting) == 0 || OptedOut(pod) {
		return res
	}
	if !podgate.HasGate(pod) {
		pod.Spec.ReadinessGates = append(pod.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: podgate.ConditionType})
		res.GateAdded = true
	}
	serving := servingContainers(pod, selecting)
	var toHook []*corev1.Container
	for _, c := range serving {
		switch {
		case isDrainHook(c.ctr.Lifecycle):
			// Ours, from an earlier invocation.
		case c.ctr.Lifecycle != nil && c.ctr.Lifecycle.PreStop != nil:
			res.Kept = append(res.Kept, Kept{Container: c.ctr.Name, Service: c.service})
		default:
			toHook = append(toHook, c.ctr)
		}
	}
	if len(toHook) == 0 {
		return res
	}
	if d.Host == "" || pod.Name == "" && (pod.GenerateName == "" || newName == nil) {
		// An unnamed pod is rejected by the API server anyway.
		for _, c := range toHook {
			res.Unhooked = append(res.Unhooked, c.Name)
		}
		return res
	}
	if pod.Name == "" {
		pod.Name = newName(pod.GenerateName)
		res.NameSet = true
	}
	hook := drainHook(namespace, pod.Name, d.Host, d.Port)
	if d.Relay != nil {
		if why := relayConflict(pod, d.Relay.Port); why != "" {
			res.NoRelay = why
		} else {
			// The relay on the pod's own address (an empty host).
			hook = drainHook(namespace, pod.Name, "", d.Relay.Port)
			if len(d.Key) > 0 {
				hook.HTTPGet.HTTPHeaders = []corev1.HTTPHeader{{Name: drainrelay.TokenHeader, Value: drain.PodToken(d.Key, namespace, pod.Name)}}
			}
			if !slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == RelayContainer }) {
				// First, so the relay starts before any other container.
				pod.Spec.InitContainers = append([]corev1.Container{relayContainer(namespace, pod, d)}, pod.Spec.InitContainers...)
				res.RelayAdded = true
			}
		}
	}
	for _, c := range toHook {
		if c.Lifecycle == nil {
			c.Lifecycle = &corev1.Lifecycle{}
		}
		c.Lifecycle.PreStop = hook.DeepCopy()
		res.Hooked = append(res.Hooked, c.Name)
	}
	return res
}

// drainHook is the preStop hook that waits on the drain endpoint at
// host:port — the drain Service, or the drain relay on the pod's own address
// when host is empty (the kubelet's default).
func drainHook(namespace, name, host string, port int32) *corev1.LifecycleHandler {
	return &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
		// Namespace and pod names are DNS labels and subdomains: nothing
		// to escape, and a slash is legal in a query.
		Path:   drain.Path + "?pod=" + namespace + "/" + name,
		Port:   intstr.FromInt32(port),
		Host:   host,
		Scheme: corev1.URISchemeHTTP,
	}}
}

// relayConflict says why the relay cannot run in pod, or "": on the host's
// network its port would be the node's, and a container may already use
// the port.
func relayConflict(pod *corev1.Pod, port int32) string {
	if pod.Spec.HostNetwork {
		return "the pod uses the host's network"
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.Name == RelayContainer {
				continue
			}
			for _, p := range c.Ports {
				if p.ContainerPort == port {
					return fmt.Sprintf("container %s uses the relay's port %d", c.Name, port)
				}
			}
		}
	}
	return ""
}

// relayContainer is the drain relay as a native sidecar: restartable, so
// the kubelet stops it only after the app's containers (and their preStop
// hooks); its longest wait is the pod's grace period. It needs little and
// may touch nothing: no root, no privilege, a read-only root filesystem
// (what the restricted Pod Security Standard asks). It has CPU and memory
// limits as well as requests: a namespace whose ResourceQuota counts limits
// refuses a pod with a container that has none. The pod's UID, which the
// relay sends with its calls, comes from the downward API: it does not exist
// yet at admission, and the kubelet resolves the fieldRef when the container
// starts.
func relayContainer(namespace string, pod *corev1.Pod, d Drain) corev1.Container {
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	return corev1.Container{
		Name:          RelayContainer,
		Image:         d.Relay.Image,
		Command:       []string{"/zerodrop"},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Args: []string{"drain-relay",
			"--listen", ":" + strconv.Itoa(int(d.Relay.Port)),
			"--target", "http://" + net.JoinHostPort(d.Host, strconv.Itoa(int(d.Port))),
			"--pod", namespace + "/" + pod.Name,
			"--max-wait", strconv.FormatInt(grace, 10) + "s"},
		Env: relayEnv(namespace, pod.Name, d.Key),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](65532),
			RunAsGroup:               ptr.To[int64](65532),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// relayEnv is the relay's environment: the pod's UID (the downward API)
// and, with a drain key, its token. The token is in the pod's spec, which
// only those who may read the pod see; the pods that can reach the relay's
// port cannot.
func relayEnv(namespace, name string, key []byte) []corev1.EnvVar {
	env := []corev1.EnvVar{{Name: drainrelay.UIDEnv, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.uid"}}}}
	if len(key) > 0 {
		env = append(env, corev1.EnvVar{Name: drainrelay.TokenEnv, Value: drain.PodToken(key, namespace, name)})
	}
	return env
}

// isDrainHook recognises a preStop hook that calls a drain endpoint.
func isDrainHook(l *corev1.Lifecycle) bool {
	return l != nil && l.PreStop != nil && l.PreStop.HTTPGet != nil &&
		strings.HasPrefix(l.PreStop.HTTPGet.Path, drain.Path+"?")
}

type servingContainer struct {
	ctr     *corev1.Container
	service string
}

// servingContainers are the containers (and restartable init containers,
// i.e. sidecars) that serve a target port of the selecting Services, in pod
// order, each once. A numeric target port matches a declared containerPort;
// when no container declares it, every container may be the one listening
// (ports need not be declared, and containers share the pod's network), so
// all of them count: a gate without a hook on the serving container would
// let it get SIGTERM while still served, and the drain endpoint only waits,
// so several hooks of one pod cost nothing. A named target port matches a
// containerPort's name only, as in the endpoints controller (an undeclared
// name gets no endpoint, so nothing serves it).
func servingContainers(pod *corev1.Pod, selecting []*corev1.Service) []servingContainer {
	var all []*corev1.Container
	for i := range pod.Spec.InitContainers {
		// The drain relay is ours: it serves the hook, not the Services.
		if c := &pod.Spec.InitContainers[i]; c.Name != RelayContainer && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			all = append(all, c)
		}
	}
	for i := range pod.Spec.Containers {
		all = append(all, &pod.Spec.Containers[i])
	}
	by := map[*corev1.Container]string{}
	for _, svc := range selecting {
		for _, sp := range svc.Spec.Ports {
			matched := false
			for _, c := range all {
				if servesPort(c, sp) {
					matched = true
					if _, ok := by[c]; !ok {
						by[c] = svc.Namespace + "/" + svc.Name
					}
				}
			}
			if matched || sp.TargetPort.Type != intstr.Int {
				continue
			}
			for _, c := range all {
				if _, ok := by[c]; !ok {
					by[c] = svc.Namespace + "/" + svc.Name
				}
			}
		}
	}
	var out []servingContainer
	for _, c := range all {
		if s, ok := by[c]; ok {
			out = append(out, servingContainer{ctr: c, service: s})
		}
	}
	return out
}

func servesPort(c *corev1.Container, sp corev1.ServicePort) bool {
	proto := sp.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	return slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
		cproto := cp.Protocol
		if cproto == "" {
			cproto = corev1.ProtocolTCP
		}
		if cproto != proto {
			return false
		}
		if sp.TargetPort.Type == intstr.String {
			return sp.TargetPort.StrVal != "" && cp.Name == sp.TargetPort.StrVal
		}
		target := sp.TargetPort.IntVal
		if target == 0 {
			// Unset targetPort defaults to port.
			target = sp.Port
		}
		return cp.ContainerPort == target
	})
}

// Annotations are the webhook's label and annotation a user sets
// (docs/annotations.md is generated from them).
var Annotations = []model.AnnotationDoc{
	{Key: LabelInject, On: "Namespace label", Default: "absent: no injection",
		Doc: "`enabled` opts the namespace's new pods in: the webhook adds the readiness gate and the drain hook (and the drain relay sidecar) to pods that a zerodrop Service selects."},
	{Key: AnnotationInject, On: "Pod", Default: "absent: injected when the namespace opts in",
		Doc: "`false` opts one pod out of injection."},
}
