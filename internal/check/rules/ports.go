package rules

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// containerRef is a container of the pod template that can serve traffic:
// a regular container or a sidecar (an init container with restartPolicy
// Always), which the EndpointSlice controller also searches for named ports.
type containerRef struct {
	c       *corev1.Container
	sidecar bool
}

func (c *check) containers() []containerRef {
	spec := &c.w.tmpl.Spec
	out := make([]containerRef, 0, len(spec.Containers))
	for i := range spec.Containers {
		out = append(out, containerRef{c: &spec.Containers[i]})
	}
	for i := range spec.InitContainers {
		ic := &spec.InitContainers[i]
		if ic.RestartPolicy != nil && *ic.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out = append(out, containerRef{c: ic, sidecar: true})
		}
	}
	return out
}

// targetPort applies the API defaults: targetPort unset means port, protocol
// unset means TCP.
func targetPort(sp corev1.ServicePort) (intstr.IntOrString, corev1.Protocol) {
	tp := sp.TargetPort
	if (tp.Type == intstr.Int && tp.IntVal == 0) || (tp.Type == intstr.String && tp.StrVal == "") {
		tp = intstr.FromInt32(sp.Port)
	}
	proto := sp.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	return tp, proto
}

func portProtocol(p corev1.ContainerPort) corev1.Protocol {
	if p.Protocol == "" {
		return corev1.ProtocolTCP
	}
	return p.Protocol
}

// serves reports whether the container declares the Service port's target:
// by name and protocol for a named targetPort (as the EndpointSlice
// controller resolves it), by number and protocol for a numeric one.
func serves(ctr *corev1.Container, sp corev1.ServicePort) bool {
	tp, proto := targetPort(sp)
	for _, p := range ctr.Ports {
		if portProtocol(p) != proto {
			continue
		}
		if tp.Type == intstr.String && p.Name == tp.StrVal {
			return true
		}
		if tp.Type == intstr.Int && p.ContainerPort == tp.IntVal {
			return true
		}
	}
	return false
}

// servingContainers returns the containers a selecting Service sends traffic
// to. When no container declares a targeted port (ZD402, or a numeric port
// that works undeclared) every regular container is assumed to serve, so
// that the other rules still run — except a container whose image is known
// to listen only on ports none of the Services target (Istio's pilot beside
// a gateway's proxy): its readiness and shutdown cannot drop their traffic.
// When that leaves no container, all are kept as before. A pause placeholder
// is never kept (injection.go): a pod of placeholders has no container of
// the manifest that serves.
func (c *check) servingContainers() []*corev1.Container {
	var out []*corev1.Container
	for _, ref := range c.containers() {
		if placeholder(ref.c) {
			continue // pause serves nothing: an injected container does (injection.go)
		}
		for _, s := range c.svcs {
			if servesAny(ref.c, s.svc.Spec.Ports) {
				out = append(out, ref.c)
				break
			}
		}
	}
	if len(out) > 0 {
		return out
	}
	var all []*corev1.Container
	for i := range c.w.tmpl.Spec.Containers {
		ctr := &c.w.tmpl.Spec.Containers[i]
		if placeholder(ctr) {
			continue
		}
		all = append(all, ctr)
		if c.mayServeUndeclared(ctr) {
			out = append(out, ctr)
		}
	}
	if len(out) == 0 {
		return all
	}
	return out
}

// mayServeUndeclared reports whether a container that declares none of the
// targeted ports may still listen on one of them: true unless its ports are
// known (knownPorts) and no Service's numeric targetPort is among them. A
// named targetPort resolves only through a declared port, so it never
// reaches an undeclared listener.
func (c *check) mayServeUndeclared(ctr *corev1.Container) bool {
	known := knownPorts(ctr)
	if known == nil {
		return true
	}
	for _, s := range c.svcs {
		for _, sp := range s.svc.Spec.Ports {
			if tp, _ := targetPort(sp); tp.Type == intstr.Int && known[tp.IntVal] {
				return true
			}
		}
	}
	return false
}

// pilotPorts are the ports Istio's pilot-discovery listens on with its
// default flags: --httpAddr :8080, --grpcAddr :15010, --secureGRPCAddr
// :15012 (15011 before istiod), --monitoringAddr :15014, --httpsAddr :15017
// (injection and validation webhooks) and ControlZ's 9876. A gateway's
// 80/443 are served by the Envoy next to it, never by pilot.
var pilotPorts = map[int32]bool{8080: true, 9876: true, 15010: true, 15011: true, 15012: true, 15014: true, 15017: true}

// knownPorts returns the ports a container listens on when its image and
// arguments say what it runs, nil when they do not. Only images whose
// listeners are documented defaults are listed: a wrong entry here would hide
// a real finding.
func knownPorts(ctr *corev1.Container) map[int32]bool {
	if imageName(ctr.Image) == "pilot" && (slices.Contains(ctr.Args, "discovery") || slices.ContainsFunc(ctr.Command, func(s string) bool {
		return strings.HasSuffix(s, "pilot-discovery")
	})) {
		return pilotPorts
	}
	return nil
}

// imageName is the last path element of an image reference without its tag
// or digest: "pilot" for gcr.io/istio-testing/pilot:1.8 and
// docker.io/istio/pilot@sha256:….
func imageName(image string) string {
	if i := strings.IndexByte(image, '@'); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndexByte(image, '/'); i >= 0 {
		image = image[i+1:]
	}
	if i := strings.IndexByte(image, ':'); i >= 0 {
		image = image[:i]
	}
	return image
}

func servesAny(ctr *corev1.Container, ports []corev1.ServicePort) bool {
	for _, sp := range ports {
		if serves(ctr, sp) {
			return true
		}
	}
	return false
}

// checkPorts is ZD402, reported on the Service, once per port and workload.
// A numeric targetPort reaches the pod whether a container declares it or
// not; when no container declares any port there is nothing to check it
// against, so only named targetPorts (which then resolve to nothing) count.
func (c *check) checkPorts() {
	declared := false
	for _, ref := range c.containers() {
		declared = declared || len(ref.c.Ports) > 0
	}
	for _, s := range c.svcs {
		extra := ignored(&s.svc.ObjectMeta)
		for _, sp := range s.svc.Spec.Ports {
			found := false
			for _, ref := range c.containers() {
				if serves(ref.c, sp) {
					found = true
					break
				}
			}
			tp, proto := targetPort(sp)
			if found || (!declared && tp.Type == intstr.Int) {
				continue
			}
			portDesc := fmt.Sprintf("port %d/%s", sp.Port, proto)
			if sp.Name != "" {
				portDesc = fmt.Sprintf("port %q (%d/%s)", sp.Name, sp.Port, proto)
			}
			var msg, fix string
			if tp.Type == intstr.String {
				msg = fmt.Sprintf("%s targets the named port %q, which no container of %s declares with protocol %s: the pods get no endpoint for this port and the load balancer has no backend",
					portDesc, tp.StrVal, c.w.id(), proto)
				fix = fmt.Sprintf("name the serving container's port %q (ports[].name) or set targetPort to the container's port number", tp.StrVal)
			} else {
				msg = fmt.Sprintf("%s targets port %d, which no container of %s declares with protocol %s: traffic reaches the pod only if something listens there undeclared, and the serving container cannot be checked",
					portDesc, tp.IntVal, c.w.id(), proto)
				fix = fmt.Sprintf("declare containerPort %d (protocol %s) on the serving container, or point targetPort at a declared port", tp.IntVal, proto)
			}
			c.addOn(s.src, s.id(), extra, "ZD402", "", msg, fix,
				fmt.Sprintf("targetPort %s (unset means port %d), protocol %s; containers searched: regular containers and sidecars (init containers with restartPolicy Always)", tp.String(), sp.Port, proto))
		}
	}
}
