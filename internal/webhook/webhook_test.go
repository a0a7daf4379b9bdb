package webhook

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"zerodrop.dev/zerodrop/internal/controller/podgate"
	"zerodrop.dev/zerodrop/internal/controlplane"
)

// webhookEnv is a real kube-apiserver that calls this package's handler
// through deploy/webhook.yaml (envtest points its service at the local
// server and fills in the caBundle), served by a manager wired with Setup.
type webhookEnv struct {
	admin    client.Client
	warnings *warnings
	stop     func() // stops the manager, and so the webhook server
}

func startWebhookEnv(t *testing.T) *webhookEnv {
	t.Helper()
	dir, err := controlplane.Assets("apiserver")
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    dir,
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(deployDir(t), "webhook.yaml")},
			LocalServingHost: "127.0.0.1",
		},
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stop control plane: %v", err)
		}
	})
	wio := env.WebhookInstallOptions

	mgr, err := manager.New(cfg, manager.Options{
		Logger:                 stderrLogger(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer: ctrlwebhook.NewServer(ctrlwebhook.Options{
			Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// envtest made the certificate; the certificate manager has its own tests.
	if err := Setup(ctx, mgr, Options{DrainHost: testDrainHost, Logger: stderrLogger().WithName("webhook")}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var stopped bool
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}
	t.Cleanup(stop)

	w := &warnings{}
	wcfg := rest.CopyConfig(cfg)
	wcfg.WarningHandlerWithContext = w
	admin, err := client.New(wcfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &webhookEnv{admin: admin, warnings: w, stop: stop}
}

// testDrainHost is the configured drain address; the drain Service the
// test creates gets another ClusterIP, which the hook must not use.
const testDrainHost = "10.0.0.90"

func TestWebhookOnRealAPIServer(t *testing.T) {
	e := startWebhookEnv(t)
	ctx := t.Context()
	c := e.admin
	// A drain Service at another address (a reinstall without the fixed
	// clusterIP): existing and new hooks keep the configured one.
	movedDrain := drainService()
	movedDrain.Spec.ClusterIP = "10.0.0.77"
	for _, obj := range []client.Object{
		namespace("shop", map[string]string{LabelInject: InjectEnabled}),
		namespace("plain", nil),
		namespace(DefaultNamespace, nil),
		movedDrain,
		zerodropService("shop"),
		zerodropService("plain"),
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
		}
	}

	// The manager's cache and the webhook server start asynchronously; a
	// dry run (which records nothing) tells when injection works.
	eventually(t, 30*time.Second, "the webhook to inject", func() (bool, error) {
		p := webPodIn("shop")
		if err := c.Create(ctx, p, client.DryRunAll); err != nil {
			return false, err
		}
		return podgate.HasGate(p), nil
	})
	e.warnings.take()

	t.Run("generateName pod gets the gate and a drain hook naming it", func(t *testing.T) {
		p := webPodIn("shop")
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		stored := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), stored); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(stored.Name, "web-6d8f-") || len(stored.Name) != len("web-6d8f-")+5 {
			t.Errorf("name %q, want web-6d8f- and 5 characters", stored.Name)
		}
		if !podgate.HasGate(stored) {
			t.Errorf("no readiness gate: %+v", stored.Spec.ReadinessGates)
		}
		want := &corev1.HTTPGetAction{
			Path: "/drain?pod=shop/" + stored.Name, Port: intstr.FromInt32(DefaultDrainPort),
			Host: testDrainHost, Scheme: corev1.URISchemeHTTP,
		}
		l := stored.Spec.Containers[0].Lifecycle
		if l == nil || l.PreStop == nil || l.PreStop.HTTPGet == nil || !equality.Semantic.DeepEqual(l.PreStop.HTTPGet, want) {
			t.Errorf("preStop %+v, want httpGet %+v", l, want)
		}
	})

	t.Run("numeric target port no container declares: every container gets the hook", func(t *testing.T) {
		svc := zerodropService("shop")
		svc.Name, svc.Spec.Selector = "multi", map[string]string{"app": "multi"}
		svc.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(7777)}}
		if err := c.Create(ctx, svc); err != nil {
			t.Fatal(err)
		}
		p := webPodIn("shop", func(p *corev1.Pod) {
			p.GenerateName, p.Labels = "multi-", svc.Spec.Selector
			p.Spec.Containers = []corev1.Container{{Name: "app", Image: "example.com/app:1"}, {Name: "helper", Image: "example.com/helper:1"}}
		})
		// The cache may not show the new Service yet.
		eventually(t, 30*time.Second, "the webhook to see Service shop/multi", func() (bool, error) {
			dry := p.DeepCopy()
			if err := c.Create(ctx, dry, client.DryRunAll); err != nil {
				return false, err
			}
			return podgate.HasGate(dry), nil
		})
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		stored := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), stored); err != nil {
			t.Fatal(err)
		}
		if !podgate.HasGate(stored) {
			t.Errorf("no readiness gate: %+v", stored.Spec.ReadinessGates)
		}
		for _, ctr := range stored.Spec.Containers {
			if l := ctr.Lifecycle; l == nil || l.PreStop == nil || l.PreStop.HTTPGet == nil ||
				l.PreStop.HTTPGet.Path != "/drain?pod=shop/"+stored.Name {
				t.Errorf("container %s: preStop %+v, want the drain hook: a gate without a hook lets it stop while served", ctr.Name, l)
			}
		}
	})

	t.Run("opted-out pod is unchanged", func(t *testing.T) {
		p := webPodIn("shop", func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationInject: "false"} })
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		assertUntouched(t, c, p)
	})

	t.Run("pod in an unlabelled namespace is unchanged", func(t *testing.T) {
		p := webPodIn("plain")
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		assertUntouched(t, c, p)
	})

	t.Run("own preStop is kept, with a warning and an Event on the Service; a dry run records none", func(t *testing.T) {
		e.warnings.take()
		own := &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 15}}}
		// First a dry run under its own generateName: its Event, if the
		// handler wrongly recorded one, would be written before the real
		// request's (which then only counts in the first one's series).
		dry := webPodIn("shop", func(p *corev1.Pod) { p.GenerateName = "dry-"; p.Spec.Containers[0].Lifecycle = own })
		if err := c.Create(ctx, dry, client.DryRunAll); err != nil {
			t.Fatal(err)
		}
		if w := e.warnings.take(); !slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "keeps its own preStop hook") }) {
			t.Errorf("dry run: admission warnings %q, want one about the kept preStop hook", w)
		}
		p := webPodIn("shop", func(p *corev1.Pod) { p.Spec.Containers[0].Lifecycle = own })
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		stored := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), stored); err != nil {
			t.Fatal(err)
		}
		if l := stored.Spec.Containers[0].Lifecycle; l == nil || l.PreStop == nil || l.PreStop.Sleep == nil || l.PreStop.HTTPGet != nil {
			t.Errorf("preStop %+v, want the pod's own sleep", l)
		}
		if !podgate.HasGate(stored) {
			t.Errorf("the readiness gate is still wanted")
		}
		if w := e.warnings.take(); !slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "keeps its own preStop hook") }) {
			t.Errorf("admission warnings %q, want one about the kept preStop hook", w)
		}
		eventually(t, 60*time.Second, "a PreStopHookExists Event on Service shop/web", func() (bool, error) {
			var list eventsv1.EventList
			if err := c.List(ctx, &list, client.InNamespace("shop")); err != nil {
				return false, err
			}
			return slices.ContainsFunc(list.Items, func(ev eventsv1.Event) bool {
				return ev.Reason == ReasonPreStopHookExists && ev.Regarding.Kind == "Service" &&
					ev.Regarding.Name == "web" && ev.Type == corev1.EventTypeWarning
			}), nil
		})
		var list eventsv1.EventList
		if err := c.List(ctx, &list, client.InNamespace("shop")); err != nil {
			t.Fatal(err)
		}
		for _, ev := range list.Items {
			if strings.Contains(ev.Note, "shop/dry-") {
				t.Errorf("a dry-run admission wrote Event %s: %s", ev.Name, ev.Note)
			}
		}
	})

	t.Run("with the webhook down pods are still created, unmutated", func(t *testing.T) {
		e.stop()
		p := webPodIn("shop")
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := c.Create(ctx, p); err != nil {
			t.Fatalf("failurePolicy Ignore should admit the pod: %v", err)
		}
		assertUntouched(t, c, p)
	})
}

func assertUntouched(t *testing.T, c client.Client, p *corev1.Pod) {
	t.Helper()
	stored := &corev1.Pod{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(p), stored); err != nil {
		t.Fatal(err)
	}
	if podgate.HasGate(stored) || stored.Spec.Containers[0].Lifecycle != nil {
		t.Errorf("pod %s/%s was mutated: gates %+v, lifecycle %+v", stored.Namespace, stored.Name,
			stored.Spec.ReadinessGates, stored.Spec.Containers[0].Lifecycle)
	}
}
