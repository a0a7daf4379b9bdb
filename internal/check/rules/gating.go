package rules

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// A pod is Ready only when every container is, so a container without a
// readinessProbe of its own does not make the pod Ready before it serves when
// something else in the pod already waits for it. readinessGatedBy returns
// what does, or "" (ZD101 then applies).
func (c *check) readinessGatedBy(ctr *corev1.Container) string {
	served := c.servedPorts(ctr)
	for _, ref := range c.containers() {
		sib := ref.c
		if sib == ctr || sib.ReadinessProbe == nil {
			continue
		}
		// The kubelet sends a probe to the pod's IP: a sibling's probe on
		// a port this container serves checks this container.
		if port, ok := probePort(sib, sib.ReadinessProbe); ok && served[port] {
			return fmt.Sprintf("container %q's readinessProbe checks port %d, which %q serves", sib.Name, port, ctr.Name)
		}
		if why := knownGatingController(sib); why != "" {
			return why
		}
	}
	return c.injectedGate(served)
}

// Dapr's sidecar injector adds daprd to pods annotated dapr.io/enabled:
// "true". daprd's readinessProbe (/v1.0/healthz on its public port) fails
// until its runtime has initialised, and initialisation blocks until a TCP
// connection to dapr.io/app-port succeeds (blockUntilAppIsReady in
// dapr/dapr pkg/runtime): the pod is not Ready before the app listens there.
// Istio's istio-proxy (/healthz/ready) and Linkerd's linkerd-proxy (/ready)
// report only the proxy's own readiness, so they gate nothing.
const (
	daprEnabled = "dapr.io/enabled"
	daprAppPort = "dapr.io/app-port"
)

// injectedGate returns the webhook-injected sidecar whose readiness waits for
// one of the served ports, or "".
func (c *check) injectedGate(served map[int32]bool) string {
	a := c.w.tmpl.Annotations
	if a[daprEnabled] != "true" {
		return ""
	}
	port, err := strconv.ParseInt(strings.TrimSpace(a[daprAppPort]), 10, 32)
	if err != nil || !served[int32(port)] {
		return ""
	}
	return fmt.Sprintf("the daprd sidecar Dapr injects (%s) is ready only once it has connected to the app port %d (%s)", daprEnabled, port, daprAppPort)
}

// servedPorts are the ports a container listens on as far as the manifest
// says: those it declares, or, when it declares none, the numeric target
// ports of the selecting Services (it is then assumed to serve them).
func (c *check) servedPorts(ctr *corev1.Container) map[int32]bool {
	out := map[int32]bool{}
	for _, p := range ctr.Ports {
		out[p.ContainerPort] = true
	}
	if len(out) > 0 {
		return out
	}
	for _, s := range c.svcs {
		for _, sp := range s.svc.Spec.Ports {
			if tp, _ := targetPort(sp); tp.Type == intstr.Int {
				out[tp.IntVal] = true
			}
		}
	}
	return out
}

// probePort returns the port a probe connects to; a named port is resolved
// among the ports of the container that owns the probe, as the kubelet does.
func probePort(owner *corev1.Container, p *corev1.Probe) (int32, bool) {
	var port intstr.IntOrString
	switch {
	case p.HTTPGet != nil:
		port = p.HTTPGet.Port
	case p.TCPSocket != nil:
		port = p.TCPSocket.Port
	case p.GRPC != nil:
		return p.GRPC.Port, true
	default:
		return 0, false
	}
	if port.Type == intstr.Int {
		return port.IntVal, port.IntVal > 0
	}
	for _, cp := range owner.Ports {
		if cp.Name == port.StrVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// knownGatingController recognises controllers that run in the proxy's pod
// and report ready only once the proxy is configured. NGINX Gateway Fabric's
// control-plane container (image …/nginx-gateway-fabric, not its …/nginx
// data-plane image) answers /readyz only after it has written the first
// NGINX configuration and NGINX has reloaded it
// (nginxConfiguredOnStartChecker, internal/mode/static/health.go).
func knownGatingController(sib *corev1.Container) string {
	h := sib.ReadinessProbe.HTTPGet
	if h == nil || strings.TrimSuffix(h.Path, "/") != "/readyz" {
		return ""
	}
	if imageRepository(sib.Image) == "nginx-gateway-fabric" || strings.HasSuffix(imageRepository(sib.Image), "/nginx-gateway-fabric") {
		return fmt.Sprintf("container %q (NGINX Gateway Fabric's controller) is ready only once NGINX has loaded its first configuration", sib.Name)
	}
	return ""
}

// imageRepository strips the tag and digest from an image reference.
func imageRepository(image string) string {
	if i := strings.IndexByte(image, '@'); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndexByte(image, ':'); i > strings.LastIndexByte(image, '/') {
		image = image[:i]
	}
	return image
}
