package webhook

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/controller/podgate"
)

var drainAt = Drain{Host: "10.0.0.9", Port: 9090}

func fixedName(base string) string { return base + "x7k2q" }

func lbService(name string, class *string, selector map[string]string, ports ...corev1.ServicePort) corev1.Service {
	return corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: class,
			Selector: selector, Ports: ports,
		},
	}
}

func port(p int32, target intstr.IntOrString) corev1.ServicePort {
	return corev1.ServicePort{Port: p, TargetPort: target, Protocol: corev1.ProtocolTCP}
}

var haproxyClass = ptr.To("zerodrop.dev/haproxy")

func webPod(mod ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "web-6d8f-", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}},
			{Name: "metrics", Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9000}}},
		}},
	}
	for _, m := range mod {
		m(p)
	}
	return p
}

func hook(name string) *corev1.Lifecycle {
	return &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: "/drain?pod=shop/" + name, Port: intstr.FromInt32(9090), Host: "10.0.0.9", Scheme: corev1.URISchemeHTTP,
	}}}
}

var (
	gate      = []corev1.PodReadinessGate{{ConditionType: podgate.ConditionType}}
	sleepHook = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 10}}}
	web       = map[string]string{"app": "web"}
	byNumber  = lbService("web", haproxyClass, web, port(80, intstr.FromInt32(8080)))
	byName    = lbService("web", haproxyClass, web, port(80, intstr.FromString("metrics")))
)

var relayAt = Drain{Host: "10.0.0.9", Port: 9090, Relay: &Relay{Image: "registry.example/zerodrop:v1", Port: 15909}}

// relaySidecar is the drain relay sidecar expected for pod shop/<name>.
func relaySidecar(name, maxWait string) corev1.Container {
	return corev1.Container{
		Name:    "zerodrop-drain-relay",
		Image:   "registry.example/zerodrop:v1",
		Command: []string{"/zerodrop"},
		Args:    []string{"drain-relay", "--listen", ":15909", "--target", "http://10.0.0.9:9090", "--pod", "shop/" + name, "--max-wait", maxWait},
		// The pod's UID, which the relay sends with its drain calls: it
		// does not exist yet at admission, the kubelet sets it.
		Env: []corev1.EnvVar{{Name: "ZERODROP_POD_UID", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.uid"}}}},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532),
			AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

func TestMutate(t *testing.T) {
	injected := webPod(func(p *corev1.Pod) {
		p.Name = "web-6d8f-x7k2q"
		p.Spec.ReadinessGates = gate
		p.Spec.Containers[0].Lifecycle = hook("web-6d8f-x7k2q")
	})
	for _, tc := range []struct {
		desc     string
		in       *corev1.Pod
		services []corev1.Service
		drain    Drain
		want     *corev1.Pod
		wantRes  Result
	}{{
		desc: "inject: gate, hook on the serving container, name from generateName",
		in:   webPod(), services: []corev1.Service{byNumber}, drain: drainAt,
		want:    injected,
		wantRes: Result{GateAdded: true, Hooked: []string{"app"}, NameSet: true},
	}, {
		desc: "idempotent: the webhook's own output is left as it is",
		in:   injected.DeepCopy(), services: []corev1.Service{byNumber}, drain: drainAt,
		want: injected,
	}, {
		desc:     "opt-out annotation",
		in:       webPod(func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationInject: "false"} }),
		services: []corev1.Service{byNumber}, drain: drainAt,
		want: webPod(func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationInject: "false"} }),
	}, {
		desc:     "existing preStop is kept and reported; no name needed",
		in:       webPod(func(p *corev1.Pod) { p.Spec.Containers[0].Lifecycle = sleepHook }),
		services: []corev1.Service{byNumber}, drain: drainAt,
		want: webPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].Lifecycle = sleepHook
			p.Spec.ReadinessGates = gate
		}),
		wantRes: Result{GateAdded: true, Kept: []Kept{{Container: "app", Service: "shop/web"}}},
	}, {
		desc: "named target port picks the container with that port name",
		in:   webPod(), services: []corev1.Service{byName}, drain: drainAt,
		want: webPod(func(p *corev1.Pod) {
			p.Name = "web-6d8f-x7k2q"
			p.Spec.ReadinessGates = gate
			p.Spec.Containers[1].Lifecycle = hook("web-6d8f-x7k2q")
		}),
		wantRes: Result{GateAdded: true, Hooked: []string{"metrics"}, NameSet: true},
	}, {
		desc:     "numeric target port on a named pod",
		in:       webPod(func(p *corev1.Pod) { p.GenerateName, p.Name = "", "web-0" }),
		services: []corev1.Service{lbService("web", haproxyClass, web, port(9000, intstr.FromInt32(9000)))}, drain: drainAt,
		want: webPod(func(p *corev1.Pod) {
			p.GenerateName, p.Name = "", "web-0"
			p.Spec.ReadinessGates = gate
			p.Spec.Containers[1].Lifecycle = hook("web-0")
		}),
		wantRes: Result{GateAdded: true, Hooked: []string{"metrics"}},
	}, {
		desc:     "unset target port means the Service port",
		in:       webPod(func(p *corev1.Pod) { p.GenerateName, p.Name = "", "web-0" }),
		services: []corev1.Service{lbService("web", haproxyClass, web, corev1.ServicePort{Port: 8080})}, drain: drainAt,
		want: webPod(func(p *corev1.Pod) {
			p.GenerateName, p.Name = "", "web-0"
			p.Spec.ReadinessGates = gate
			p.Spec.Containers[0].Lifecycle = hook("web-0")
		}),
		wantRes: Result{GateAdded: true, Hooked: []string{"app"}},
	}, {
		desc: "a single container serves an undeclared numeric port",
		in: webPod(func(p *corev1.Pod) {
			p.GenerateName, p.Name = "", "web-0"
			p.Spec.Containers = []corev1.Container{{Name: "app"}}
		}),
		services: []corev1.Service{byNumber}, drain: drainAt,
		want: webPod(func(p *corev1.Pod) {
			p.GenerateName, p.Name = "", "web-0"
			p.Spec.Containers = []corev1.Container{{Name: "app", Lifecycle: hook("web-0")}}
			p.Spec.ReadinessGates = gate
		}),
		wantRes: Result{GateAdded: true, Hooked: []string{"app"}},
	}, {
		desc: "protocol must match: a UDP Service port is served by the container declaring it for UDP",
		in: webPod(func(p *corev1.Pod) {
			p.GenerateName, p.Name = "", "web-0"
			p.Spec.Containers[1].Ports = append(p.Spec.Containers[1].Ports, corev1.ContainerPort{ContainerPort: 8080, Protocol: corev1.ProtocolUDP})
		}),
		services: []corev1.Service{lbService("web", haproxyClass, web,
			corev1.ServicePort{Port: 8080, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolUDP})},
		drain: drainAt,
		want: webPod(func(p *corev1.Pod) {
			p.GenerateName, p.Name = "", "web-0"
			p.Spec.Containers[1].Ports = append(p.Spec.Containers[1].Ports, corev1.ContainerPort{ContainerPort: 8080, Protocol: corev1.ProtocolUDP})
			p.Spec.Containers[1].Lifecycle = hook("web-0")
			p.Spec.ReadinessGates = gate
		}),
		wantRes: Result{GateAdded: true, Hooked: []string{"metrics"}},
	}, {
		// Any container may listen on an undeclared port: hooking them all
		// is the only way the one that serves it waits for the drain (a
		// gate without a hook lets the pod get SIGTERM while still served).
		desc: "a numeric target port no container declares: every container is hooked, own hooks kept",
		in: webPod(func(p *corev1.Pod) {
			p.GenerateName, p.Name = "", "web-0"
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "log", Lifecycle: sleepHook})
			p.Spec.InitContainers = []corev1.Container{
				{Name: "setup"},
				{Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
			}
		}),
		services: []corev1.Service{lbService("web", haproxyClass, web, port(80, intstr.FromInt32(7777)))}, drain: drainAt,
		want: webPod(func(p *corev1.Pod) {
			p.GenerateName, p.Name = "", "web-0"
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "log", Lifecycle: sleepHook})
			p.Spec.InitContainers = []corev1.Container{
				{Name: "setup"},
				{Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Lifecycle: hook("web-0")},
			}
			p.Spec.Containers[0].Lifecycle = hook("web-0")
			p.Spec.Containers[1].Lifecycle = hook("web-0")
			p.Spec.ReadinessGates = gate
		}),
		wantRes: Result{GateAdded: true, Hooked: []string{"proxy", "app", "metrics"},
			Kept: []Kept{{Container: "log", Service: "shop/web"}}},
	}, {
		desc: "a sidecar (restartable init container) that serves the port is hooked",
		in: webPod(func(p *corev1.Pod) {
			p.GenerateName, p.Name = "", "web-0"
			p.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
				Ports: []corev1.ContainerPort{{ContainerPort: 8443}}}}
		}),
		services: []corev1.Service{lbService("web", haproxyClass, web, port(443, intstr.FromInt32(8443)))}, drain: drainAt,
		want: webPod(func(p *corev1.Pod) {
			p.GenerateName, p.Name = "", "web-0"
			p.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
				Ports: []corev1.ContainerPort{{ContainerPort: 8443}}, Lifecycle: hook("web-0")}}
			p.Spec.ReadinessGates = gate
		}),
		wantRes: Result{GateAdded: true, Hooked: []string{"proxy"}},
	}, {
		desc: "no drain host: gate only, the container is reported unhooked",
		in:   webPod(), services: []corev1.Service{byNumber},
		want:    webPod(func(p *corev1.Pod) { p.Spec.ReadinessGates = gate }),
		wantRes: Result{GateAdded: true, Unhooked: []string{"app"}},
	}, {
		desc: "relay: the sidecar first among the init containers, the hook on the pod's own address",
		in: webPod(func(p *corev1.Pod) {
			p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](45)
			p.Spec.InitContainers = []corev1.Container{{Name: "migrate"}}
		}),
		services: []corev1.Service{byNumber}, drain: relayAt,
		want: webPod(func(p *corev1.Pod) {
			p.Name = "web-6d8f-x7k2q"
			p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](45)
			p.Spec.ReadinessGates = gate
			p.Spec.InitContainers = []corev1.Container{relaySidecar("web-6d8f-x7k2q", "45s"), {Name: "migrate"}}
			p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/drain?pod=shop/web-6d8f-x7k2q", Port: intstr.FromInt32(15909), Scheme: corev1.URISchemeHTTP}}}
		}),
		wantRes: Result{GateAdded: true, Hooked: []string{"app"}, NameSet: true, RelayAdded: true},
	}, {
		desc:     "relay: an undeclared target port hooks every container but not the relay",
		in:       webPod(func(p *corev1.Pod) { p.Name = "web-0" }),
		services: []corev1.Service{lbService("web", haproxyClass, web, port(80, intstr.FromInt32(7070)))}, drain: relayAt,
		want: webPod(func(p *corev1.Pod) {
			p.Name = "web-0"
			p.Spec.ReadinessGates = gate
			p.Spec.InitContainers = []corev1.Container{relaySidecar("web-0", "30s")}
			for i := range p.Spec.Containers {
				p.Spec.Containers[i].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/drain?pod=shop/web-0", Port: intstr.FromInt32(15909), Scheme: corev1.URISchemeHTTP}}}
			}
		}),
		wantRes: Result{GateAdded: true, Hooked: []string{"app", "metrics"}, RelayAdded: true},
	}, {
		desc: "relay: a container on the relay's port keeps the direct hook",
		in: webPod(func(p *corev1.Pod) {
			p.Name = "web-0"
			p.Spec.Containers[1].Ports[0].ContainerPort = 15909
		}),
		services: []corev1.Service{byNumber}, drain: relayAt,
		want: webPod(func(p *corev1.Pod) {
			p.Name = "web-0"
			p.Spec.Containers[1].Ports[0].ContainerPort = 15909
			p.Spec.ReadinessGates = gate
			p.Spec.Containers[0].Lifecycle = hook("web-0")
		}),
		wantRes: Result{GateAdded: true, Hooked: []string{"app"}, NoRelay: "container metrics uses the relay's port 15909"},
	}, {
		desc: "relay: a pod on the host's network keeps the direct hook",
		in: webPod(func(p *corev1.Pod) {
			p.Name = "web-0"
			p.Spec.HostNetwork = true
		}),
		services: []corev1.Service{byNumber}, drain: relayAt,
		want: webPod(func(p *corev1.Pod) {
			p.Name = "web-0"
			p.Spec.HostNetwork = true
			p.Spec.ReadinessGates = gate
			p.Spec.Containers[0].Lifecycle = hook("web-0")
		}),
		wantRes: Result{GateAdded: true, Hooked: []string{"app"}, NoRelay: "the pod uses the host's network"},
	}, {
		desc: "no selecting Service: unchanged",
		in:   webPod(), drain: drainAt,
		services: []corev1.Service{
			lbService("other-class", ptr.To("example.com/lb"), web, port(80, intstr.FromInt32(8080))),
			lbService("other-app", haproxyClass, map[string]string{"app": "db"}, port(80, intstr.FromInt32(8080))),
			lbService("classless", nil, web, port(80, intstr.FromInt32(8080))),
		},
		want: webPod(),
	}} {
		t.Run(tc.desc, func(t *testing.T) {
			pod := tc.in.DeepCopy()
			res := Mutate(pod, "shop", Selecting(pod, tc.services, Filter{}), tc.drain, fixedName)
			if d := cmp.Diff(tc.want, pod); d != "" {
				t.Errorf("pod (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantRes, res); d != "" {
				t.Errorf("result (-want +got):\n%s", d)
			}
			if res.Changed() != (tc.wantRes.GateAdded || len(tc.wantRes.Hooked) > 0 || tc.wantRes.NameSet || tc.wantRes.RelayAdded) {
				t.Errorf("Changed() = %v", res.Changed())
			}
			// Every output is a fixed point.
			again := pod.DeepCopy()
			if r := Mutate(again, "shop", Selecting(again, tc.services, Filter{}), tc.drain, fixedName); r.Changed() {
				t.Errorf("second Mutate changed the pod: %+v", r)
			}
		})
	}
}

func TestSelecting(t *testing.T) {
	pod := webPod()
	deleting := lbService("deleting", haproxyClass, web)
	deleting.DeletionTimestamp = &metav1.Time{}
	clusterIP := lbService("cluster-ip", haproxyClass, web)
	clusterIP.Spec.Type = corev1.ServiceTypeClusterIP
	services := []corev1.Service{
		lbService("haproxy", haproxyClass, web),
		lbService("azure", ptr.To("zerodrop.dev/azure"), web),
		lbService("foreign", ptr.To("service.k8s.aws/nlb"), web),
		lbService("classless", nil, web),
		lbService("no-selector", haproxyClass, nil),
		lbService("subset", haproxyClass, map[string]string{"app": "web", "tier": "front"}),
		deleting, clusterIP,
	}
	names := func(s []*corev1.Service) (out []string) {
		for _, svc := range s {
			out = append(out, svc.Name)
		}
		return out
	}
	for _, tc := range []struct {
		desc   string
		filter Filter
		want   []string
	}{
		{"any zerodrop.dev/ class", Filter{}, []string{"haproxy", "azure"}},
		{"classless too", Filter{IncludeClassless: true}, []string{"haproxy", "azure", "classless"}},
		{"the controller's class only", Filter{Classes: []string{"zerodrop.dev/haproxy"}}, []string{"haproxy"}},
	} {
		if d := cmp.Diff(tc.want, names(Selecting(pod, services, tc.filter))); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.desc, d)
		}
	}
}

func TestGenerateName(t *testing.T) {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	name := GenerateName("web-6d8f-")
	suffix, ok := strings.CutPrefix(name, "web-6d8f-")
	if !ok || len(suffix) != 5 || strings.Trim(suffix, alphabet) != "" {
		t.Errorf("GenerateName = %q, want web-6d8f- and 5 of %s", name, alphabet)
	}
	long := strings.Repeat("a", 80)
	if got := GenerateName(long); len(got) != 63 || !strings.HasPrefix(got, long[:58]) {
		t.Errorf("long base gives %q (%d), want 58 + 5 characters", got, len(got))
	}
}
