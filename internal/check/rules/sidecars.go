package rules

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"zerodrop.dev/zerodrop/internal/check/manifest"
)

// A sidecar the application needs must keep working while the application
// does. When a pod starts terminating, the kubelet runs each regular
// container's preStop hook and then sends it SIGTERM, every container at
// once; only native sidecars (init containers with restartPolicy: Always) are
// stopped after the main containers have exited. So a regular sidecar without
// a preStop delay of its own stops at the start of termination, while the
// application, in its preStop delay, still gets the connections the load
// balancer sends until it has deregistered the pod.
//
// What each known sidecar does on SIGTERM, and what keeps it up:
//   - Dapr's daprd (dapr.io/enabled): stops its API and lets in-flight calls
//     finish within dapr.io/graceful-shutdown-seconds (default 5, daprd's
//     DefaultGracefulShutdownDuration; a maximum, dapr/dapr#7211);
//     dapr.io/block-shutdown-duration (a Go duration) keeps the API up that
//     long first (dapr/dapr#4313). The load balancer reaches the app port
//     directly, so only requests that call Dapr fail: a warning.
//   - Linkerd's proxy (linkerd.io/inject): "immediately begin[s] a graceful
//     shutdown where it refuses all new requests" (Linkerd's Graceful Pod
//     Shutdown); config.alpha.linkerd.io/proxy-wait-before-exit-seconds adds a
//     preStop sleep to it. It carries the pod's inbound connections (unless
//     the port is in config.linkerd.io/skip-inbound-ports): an error. Native
//     when config[.alpha|.beta].linkerd.io/proxy-enable-native-sidecar is
//     "true" (opt-in).
//   - Istio's istio-proxy (sidecar.istio.io/inject): pilot-agent drains for
//     terminationDrainDuration (default 5 s, proxy.istio.io/config) and exits;
//     inbound traffic goes through it. Since Istio 1.27 it is injected as a
//     native sidecar wherever the cluster supports them, so only an explicit
//     sidecar.istio.io/nativeSidecar: "false" says it is not;
//     EXIT_ON_ZERO_ACTIVE_CONNECTIONS makes its exit depend on traffic
//     (unknown here: no finding).
//   - AWS App Mesh's Envoy (appmesh.k8s.aws/sidecarInjectorWebhook: enabled
//     on the namespace or the pod, "disabled" on the pod opts out): the
//     controller injects it with preStop `sh -c "sleep N"`, N its
//     --prestop-delay flag, default 20 (aws/aws-app-mesh-controller-for-k8s,
//     pkg/inject/config.go), and Envoy carries the pod's inbound connections
//     (iptables redirect of the app ports). The flag is the controller's, not
//     the pod's: the default is assumed and the finding says so. A pod with
//     a container named "envoy" is a virtual gateway, which gets no sidecar
//     (pkg/inject/virtualgateway_envoy.go configures that container).
//   - Cloud SQL Auth Proxy (a container of the manifest): refuses new
//     connections on SIGTERM; --max-sigterm-delay (v2) or -term_timeout (v1)
//     only keeps open ones (cloud-sql-proxy#1640), counted in its favour.
//
// stoppingSidecar is one such sidecar as the manifest configures it.
type stoppingSidecar struct {
	what    string  // for messages: "Dapr's injected daprd (dapr.io/enabled)"
	window  float64 // seconds it keeps serving after termination starts
	why     string  // how window was resolved
	inbound bool    // it carries the Service's connections to the container
	fix     string
	// container is the sidecar's name when the manifest holds it (the finding
	// then points at it); "" for an injected one (at the annotations).
	container string
}

// checkSidecarStop is ZD206: a sidecar the serving container needs stops
// before the load balancer can have deregistered the pod. The container is
// needed until the deregistration time, or the grace period if shorter (the
// kubelet kills the pod then anyway); its own preStop delay (ZD201/ZD202)
// does not keep a sibling up.
func (c *check) checkSidecarStop(ctr *corev1.Container) {
	sidecars := c.stoppingSidecars(ctr)
	if len(sidecars) == 0 {
		return // most pods: nothing to format
	}
	dereg := float64(c.timing.Deregistration)
	grace, graceWhy := c.gracePeriod()
	need, needWhy := dereg, "the load balancer's deregistration time"
	if float64(grace) < need {
		need, needWhy = float64(grace), fmt.Sprintf("%s, shorter than the deregistration time of %d s", graceWhy, c.timing.Deregistration)
	}
	if need <= 0 {
		return
	}
	own := preStopDelay(ctr, c.timing.Deregistration, c.nsLabels[InjectLabel] == "enabled")
	ownWhy := "its own preStop delay does not keep the sidecar up"
	if own.kind == delayNone || own.kind == delayUnknown {
		ownWhy = "adding the preStop delay ZD201 asks for would not keep the sidecar up"
	}
	for _, s := range sidecars {
		if s.window >= need {
			continue
		}
		sev, harm := Warning, "requests that call it fail"
		if s.inbound {
			sev, harm = Error, "connections the load balancer sends are refused, whatever the application does"
		}
		n := len(c.findings)
		c.addSeverity(sev, "ZD206", ctr.Name,
			fmt.Sprintf("container %q needs %s, which stops %s, while the pod must keep serving for %s (%s): %s; %s", ctr.Name, s.what, stopsAt(s.window), seconds(need), needWhy, harm, ownWhy),
			s.fix,
			fmt.Sprintf("sidecar: %s: %s < %s needed (%s)", s.why, seconds(s.window), seconds(need), needWhy),
			"deregistration: "+c.timing.DeregistrationWhy)
		if len(c.findings) > n {
			c.findings[n].fields = c.sidecarFields(ctr.Name, s.container)
		}
	}
}

// stopsAt says when a sidecar stops, counted from the start of termination.
func stopsAt(window float64) string {
	if window == 0 {
		return "as soon as the pod starts terminating"
	}
	return seconds(window) + " after the pod starts terminating"
}

// sidecarFields points a ZD206 finding at what its fix changes: the sidecar
// container of the manifest, or the pod template's annotations.
func (c *check) sidecarFields(app, sidecar string) [][]string {
	pod := []string{"spec", "template", "spec"}
	meta := []string{"spec", "template", "metadata", "annotations"}
	if c.w.kind == manifest.KindPod {
		pod, meta = []string{"spec"}, []string{"metadata", "annotations"}
	}
	withPod := func(tail ...string) []string { return append(append([]string{}, pod...), tail...) }
	if sidecar != "" {
		return [][]string{withPod("containers", "name="+sidecar, "lifecycle", "preStop"), withPod("containers", "name="+sidecar)}
	}
	return [][]string{meta, withPod("containers", "name="+app)}
}

// stoppingSidecars returns the sidecars of the pod whose stop the manifest
// resolves; a setting it cannot read (an invalid duration, a drain that
// waits for connections) leaves that sidecar out.
func (c *check) stoppingSidecars(ctr *corev1.Container) []stoppingSidecar {
	a := c.w.tmpl.Annotations
	var out []stoppingSidecar
	if s, ok := daprSidecar(a); ok {
		out = append(out, s)
	}
	if s, ok := c.linkerdSidecar(ctr); ok {
		out = append(out, s)
	}
	if s, ok := c.istioSidecar(ctr); ok {
		out = append(out, s)
	}
	if s, ok := c.appMeshSidecar(); ok {
		out = append(out, s)
	}
	for i := range c.w.tmpl.Spec.Containers {
		sc := &c.w.tmpl.Spec.Containers[i]
		if sc.Name == ctr.Name {
			continue
		}
		if s, ok := c.cloudSQLProxy(sc); ok {
			out = append(out, s)
		}
	}
	return out
}

func daprSidecar(a map[string]string) (stoppingSidecar, bool) {
	if a[daprEnabled] != "true" {
		return stoppingSidecar{}, false
	}
	s := stoppingSidecar{what: "Dapr's injected daprd (" + daprEnabled + ")",
		fix: "keep daprd's API up while the application drains: annotate the pod dapr.io/block-shutdown-duration with at least the deregistration time (e.g. \"40s\"), and terminationGracePeriodSeconds above it plus dapr.io/graceful-shutdown-seconds"}
	if v, ok := a["dapr.io/block-shutdown-duration"]; ok {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d < 0 {
			return stoppingSidecar{}, false
		}
		s.window, s.why = d.Seconds(), fmt.Sprintf("dapr.io/block-shutdown-duration %q keeps its API up", v)
		return s, true
	}
	s.window, s.why = 5, "no dapr.io/block-shutdown-duration: it stops its API on SIGTERM, in-flight calls get at most dapr.io/graceful-shutdown-seconds (default 5)"
	if v, ok := a["dapr.io/graceful-shutdown-seconds"]; ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
			s.window, s.why = float64(n), fmt.Sprintf("no dapr.io/block-shutdown-duration: it stops its API on SIGTERM, in-flight calls get at most dapr.io/graceful-shutdown-seconds %d", n)
		}
	}
	return s, true
}

// linkerdSidecar: injected when the pod, or its namespace (when given),
// says linkerd.io/inject enabled (or ingress) and the pod does not disable it.
func (c *check) linkerdSidecar(ctr *corev1.Container) (stoppingSidecar, bool) {
	get := func(key string) (string, bool) {
		if v, ok := c.w.tmpl.Annotations[key]; ok {
			return v, true
		}
		v, ok := c.nsAnnots[key]
		return v, ok
	}
	if v, _ := get("linkerd.io/inject"); v != "enabled" && v != "ingress" {
		return stoppingSidecar{}, false
	}
	for _, k := range []string{"config.linkerd.io/proxy-enable-native-sidecar", "config.alpha.linkerd.io/proxy-enable-native-sidecar", "config.beta.linkerd.io/proxy-enable-native-sidecar"} {
		if v, _ := get(k); v == "true" {
			return stoppingSidecar{}, false
		}
	}
	s := stoppingSidecar{what: "Linkerd's injected linkerd-proxy (linkerd.io/inject)", inbound: true,
		window: 0, why: "no proxy-wait-before-exit-seconds: it refuses new requests on SIGTERM",
		fix: "delay the proxy's stop: annotate the pod config.alpha.linkerd.io/proxy-wait-before-exit-seconds with at least the deregistration time (terminationGracePeriodSeconds above it), or inject it as a native sidecar (config.beta.linkerd.io/proxy-enable-native-sidecar: \"true\")"}
	for _, k := range []string{"config.alpha.linkerd.io/proxy-wait-before-exit-seconds", "config.linkerd.io/proxy-wait-before-exit-seconds"} {
		if v, ok := get(k); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 0 {
				return stoppingSidecar{}, false
			}
			s.window, s.why = float64(n), fmt.Sprintf("%s %d: a preStop sleep, then it refuses new requests", k, n)
		}
	}
	if v, ok := get("config.linkerd.io/skip-inbound-ports"); ok && anyPortIn(c.servedPorts(ctr), v) {
		s.inbound = false // the app's inbound port bypasses it; its outbound calls still go through it
	}
	return s, true
}

// istioSidecar: only a sidecar the pod says is not native (see above).
func (c *check) istioSidecar(ctr *corev1.Container) (stoppingSidecar, bool) {
	t := c.w.tmpl
	inject := t.Labels["sidecar.istio.io/inject"]
	if inject == "" {
		inject = t.Annotations["sidecar.istio.io/inject"]
	}
	nsOn := c.nsLabels["istio-injection"] == "enabled" || c.nsLabels["istio.io/rev"] != ""
	if inject != "true" && (inject != "" || !nsOn) {
		return stoppingSidecar{}, false
	}
	if t.Annotations["sidecar.istio.io/nativeSidecar"] != "false" {
		return stoppingSidecar{}, false
	}
	s := stoppingSidecar{what: "Istio's injected istio-proxy (not native: sidecar.istio.io/nativeSidecar \"false\")", inbound: true,
		window: 5, why: "terminationDrainDuration unset (default 5 s): it drains, then exits",
		fix: "keep the proxy up while the application drains: set terminationDrainDuration in the pod's proxy.istio.io/config annotation to at least the deregistration time (terminationGracePeriodSeconds above it), or let Istio inject it as a native sidecar (remove sidecar.istio.io/nativeSidecar: \"false\")"}
	if v, ok := t.Annotations["proxy.istio.io/config"]; ok {
		var cfg struct {
			TerminationDrainDuration string            `json:"terminationDrainDuration"`
			ProxyMetadata            map[string]string `json:"proxyMetadata"`
		}
		if err := yaml.Unmarshal([]byte(v), &cfg); err != nil || cfg.ProxyMetadata["EXIT_ON_ZERO_ACTIVE_CONNECTIONS"] == "true" {
			return stoppingSidecar{}, false
		}
		if cfg.TerminationDrainDuration != "" {
			d, err := time.ParseDuration(cfg.TerminationDrainDuration)
			if err != nil {
				return stoppingSidecar{}, false
			}
			s.window, s.why = d.Seconds(), fmt.Sprintf("terminationDrainDuration %s (proxy.istio.io/config): it drains, then exits", cfg.TerminationDrainDuration)
		}
	}
	served := c.servedPorts(ctr)
	if v, ok := t.Annotations["traffic.sidecar.istio.io/excludeInboundPorts"]; ok && anyPortIn(served, v) {
		s.inbound = false
	}
	if v, ok := t.Annotations["traffic.sidecar.istio.io/includeInboundPorts"]; ok && strings.TrimSpace(v) != "*" && !anyPortIn(served, v) {
		s.inbound = false
	}
	return s, true
}

// appMeshSidecar: App Mesh's injected Envoy (see above).
func (c *check) appMeshSidecar() (stoppingSidecar, bool) {
	const key = "appmesh.k8s.aws/sidecarInjectorWebhook"
	v, ok := c.w.tmpl.Annotations[key]
	if !ok {
		v = c.nsLabels[key]
	}
	if v != "enabled" {
		return stoppingSidecar{}, false
	}
	for _, ctr := range c.w.tmpl.Spec.Containers {
		if ctr.Name == "envoy" {
			// A virtual gateway's pod: the controller configures its own
			// envoy container and injects no sidecar (virtualgateway_envoy.go).
			return stoppingSidecar{}, false
		}
	}
	return stoppingSidecar{what: "App Mesh's injected envoy (" + key + ": enabled; its stop is the controller's --prestop-delay, which the manifest does not show, assumed the default of 20 s)", inbound: true,
		window: 20, why: "the controller's --prestop-delay, default 20 (a controller flag the manifest does not show): a preStop sleep, then Envoy exits",
		fix: "raise the App Mesh controller's --prestop-delay (it applies to every pod it injects) to at least the deregistration time, with terminationGracePeriodSeconds above it"}, true
}

// cloudSQLProxy recognises Cloud SQL Auth Proxy containers (v2
// …/cloud-sql-proxy, v1 …/gce-proxy) by image.
func (c *check) cloudSQLProxy(sc *corev1.Container) (stoppingSidecar, bool) {
	repo := imageRepository(sc.Image)
	if !strings.HasSuffix(repo, "/cloud-sql-proxy") && !strings.HasSuffix(repo, "cloudsql-docker/gce-proxy") {
		return stoppingSidecar{}, false
	}
	d := preStopDelay(sc, c.timing.Deregistration, false)
	if d.kind == delayUnknown {
		return stoppingSidecar{}, false
	}
	s := stoppingSidecar{what: fmt.Sprintf("container %q (Cloud SQL Auth Proxy)", sc.Name), container: sc.Name,
		window: d.seconds, why: "no preStop delay: it refuses new connections on SIGTERM",
		fix: fmt.Sprintf("run %q as a native sidecar (under initContainers with restartPolicy: Always, Kubernetes 1.29+), which is stopped after the application; or give it a preStop sleep of at least the deregistration time", sc.Name)}
	if d.kind != delayNone {
		s.why = d.what + ", then it refuses new connections"
	}
	if t, flag, ok := sigtermDelay(append(append([]string{}, sc.Command...), sc.Args...)); ok {
		s.window += t
		s.why += fmt.Sprintf("; %s keeps open connections %s more", flag, seconds(t))
	}
	return s, true
}

// sigtermDelay reads --max-sigterm-delay (v2) or -term_timeout (v1), as
// "--flag=30s" or "--flag 30s".
func sigtermDelay(args []string) (float64, string, bool) {
	for i, a := range args {
		name, val, eq := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "max-sigterm-delay" && name != "term_timeout" {
			continue
		}
		if !eq {
			if i+1 >= len(args) {
				return 0, "", false
			}
			val = args[i+1]
		}
		d, err := time.ParseDuration(val)
		if err != nil || d < 0 {
			return 0, "", false
		}
		return d.Seconds(), "-" + name + " " + val, true
	}
	return 0, "", false
}

// anyPortIn reports whether one of ports is in a comma-separated list of
// ports and ranges ("80,8080-8090"), as the meshes' port annotations write.
func anyPortIn(ports map[int32]bool, list string) bool {
	for _, f := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(f), "-")
		l, err1 := strconv.Atoi(lo)
		h, err2 := l, error(nil)
		if isRange {
			h, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil {
			continue
		}
		for p := range ports {
			if int(p) >= l && int(p) <= h {
				return true
			}
		}
	}
	return false
}
