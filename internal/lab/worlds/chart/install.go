package chart

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// chartValues are the values the lab installs the chart with: the HAProxy
// data plane with the run's address pool and class, the lab's ports and
// drain address, a toleration for the data-plane nodes' taint, a label
// telling the run's pods apart, plain-HTTP metrics (the lab scrapes them
// without credentials), and the data plane's update strategy when the
// lab was given one (--data-plane-update).
func (r *run) values() []string {
	return append([]string{
		"provider=haproxy",
		"fullnameOverride=" + r.name,
		"haproxy.addressPool=" + cluster.FrontendPool(r.Env.ID),
		"extraArgs[0]=--load-balancer-class=" + r.Env.Class,
		// A label value is a string (--set-string).
		`string:podLabels.lab\.zerodrop\.dev/run=` + strconv.Itoa(r.Env.ID),
		"haproxy.tolerations[0].key=" + cluster.DataPlaneTaint.Key,
		"haproxy.tolerations[0].operator=Exists",
		"haproxy.tolerations[0].effect=" + string(cluster.DataPlaneTaint.Effect),
		"metrics.secure=false",
		fmt.Sprintf("metrics.port=%d", world.MetricsPort),
		fmt.Sprintf("probePort=%d", world.ProbesPort),
		fmt.Sprintf("drain.port=%d", world.DrainPort),
		"drain.clusterIP=" + cluster.DrainClusterIP,
		fmt.Sprintf("haproxy.metricsPort=%d", world.MetricsPort),
		fmt.Sprintf("haproxy.statePort=%d", dataplane.StatePort),
	}, append(strategyValues(r.w.update, r.w.hardStopAfter, r.w.gracePeriod), r.w.ChartValues(r.Env.Class)...)...)
}

// renderChart runs `helm template` on the repository's chart with values
// (--set; with the prefix "string:", --set-string).
func renderChart(values []string) ([]*unstructured.Unstructured, error) {
	helm, err := controlplane.Helm()
	if err != nil {
		return nil, err
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	args := []string{"template", "zerodrop", filepath.Join(root, "charts", "zerodrop"), "--namespace", world.ControllerNamespace}
	for _, v := range values {
		if sv, ok := strings.CutPrefix(v, "string:"); ok {
			args = append(args, "--set-string", sv)
		} else {
			args = append(args, "--set", v)
		}
	}
	out, err := supervisor.Output(context.Background(), supervisor.Command{Name: helm, Args: args})
	if err != nil {
		return nil, fmt.Errorf("helm template: %w", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("chart render: %w", err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// install renders the chart with the run's values and applies every
// object server-side; uninstall deletes them again.
func (r *run) install(ctx context.Context) error {
	objs, err := renderChart(r.values())
	if err != nil {
		return err
	}
	r.objs = objs
	dyn, mapper, err := r.dynamic()
	if err != nil {
		return err
	}
	for _, o := range objs {
		res, err := resourceFor(dyn, mapper, o)
		if err != nil {
			return err
		}
		data, err := o.MarshalJSON()
		if err != nil {
			return err
		}
		if _, err := res.Patch(ctx, o.GetName(), types.ApplyPatchType, data,
			metav1.PatchOptions{FieldManager: "zerodrop-lab", Force: ptr.To(true)}); err != nil {
			return fmt.Errorf("apply %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	r.Env.Logf("%s: installed the chart as %s (%d objects)", r.Env.Name, r.name, len(objs))
	return nil
}

// uninstall deletes the run's chart objects, in reverse order, and
// waits (up to timeout) until the release's pods are gone, so that the next
// run's install finds the drain Service's address free.
func (r *run) uninstall(ctx context.Context, timeout time.Duration) error {
	if len(r.objs) == 0 {
		return nil
	}
	dyn, mapper, err := r.dynamic()
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range slices.Backward(r.objs) {
		res, err := resourceFor(dyn, mapper, o)
		if err == nil {
			err = res.Delete(ctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s %s: %w", o.GetKind(), o.GetName(), err))
		}
	}
	sel := metav1.ListOptions{LabelSelector: world.LabelRun + "=" + strconv.Itoa(r.Env.ID)}
	errs = append(errs, traffic.WaitFor(ctx, timeout, r.name+"'s pods gone", func() (bool, string) {
		pods, err := r.w.Lab.CP.Client.CoreV1().Pods(world.ControllerNamespace).List(ctx, sel)
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods left", len(pods.Items))
	}))
	return errors.Join(errs...)
}

// dynamic returns a dynamic client and a REST mapper for the lab's API
// server.
func (r *run) dynamic() (dynamic.Interface, meta.RESTMapper, error) {
	cp := r.w.Lab.CP
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		return nil, nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cp.Client.Discovery()))
	return dyn, mapper, nil
}

func resourceFor(dyn dynamic.Interface, mapper meta.RESTMapper, o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gvk, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := o.GetNamespace()
		if ns == "" {
			ns = world.ControllerNamespace
		}
		return dyn.Resource(m.Resource).Namespace(ns), nil
	}
	return dyn.Resource(m.Resource), nil
}

// prepareImages builds the production zerodrop (no lab tag: what the
// images hold) into dir, next to the haproxy wrapper the data-plane
// image's PATH finds first (haproxyImageWrapper).
func prepareImages(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	if err := supervisor.Run(ctx, supervisor.Command{Name: "go", Args: []string{"build", "-o", filepath.Join(dir, "zerodrop"), "./cmd/zerodrop"},
		Dir: root}); err != nil {
		return fmt.Errorf("build zerodrop: %w", err)
	}
	return cluster.WriteImageHAProxyWrapper(filepath.Join(dir, "haproxy"))
}

// WaitAdmission waits until the chart's webhook answers the API server:
// probe, a pod of the workload, created as a dry run (the webhook's side
// effects are NoneOnDryRun) comes back with the readiness gate. The
// webhook's failurePolicy is Ignore, so a pod created before it answers
// would run without the gate and the drain hook. The bound is for a
// webhook that never answers: on make test's 2 cores beside the race
// line's cold compiles, the API server once reached it only after more
// than a minute (node 1's kube-proxy refused it meanwhile), which the run
// does not measure.
func (r *run) WaitAdmission(ctx context.Context, probe *corev1.Pod) error {
	return traffic.WaitFor(ctx, 3*time.Minute, r.name+"'s webhook answering", func() (bool, string) {
		got, err := r.w.Lab.CP.Client.CoreV1().Pods(probe.Namespace).Create(ctx, probe.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		if len(got.Spec.ReadinessGates) == 0 {
			// The egress proxy dials from the first node: its kube-proxy's
			// rules carry the call.
			return false, "a dry-run pod was admitted without the readiness gate (" + r.webhookEndpoints(ctx) + "; " + r.w.Lab.Net.KubeProxyState(0) + ")"
		}
		return true, ""
	})
}

// webhookEndpoints says what the endpoint slices of the run's webhook
// Services hold, for a webhook the API server does not reach: the API
// server reaches it through a node's kube-proxy, which refuses a Service
// without a ready endpoint.
func (r *run) webhookEndpoints(ctx context.Context) string {
	cfgs, err := r.w.Lab.CP.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "webhook configurations: " + err.Error()
	}
	var out []string
	for _, c := range cfgs.Items {
		for _, wh := range c.Webhooks {
			svc := wh.ClientConfig.Service
			if svc == nil || !strings.HasPrefix(svc.Name, r.name) {
				continue
			}
			eps, err := r.w.Lab.CP.Client.DiscoveryV1().EndpointSlices(svc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
			if err != nil {
				out = append(out, svc.Name+": "+err.Error())
				continue
			}
			ready, all := 0, 0
			for _, sl := range eps.Items {
				for _, ep := range sl.Endpoints {
					all++
					if ptr.Deref(ep.Conditions.Ready, false) {
						ready++
					}
				}
			}
			out = append(out, fmt.Sprintf("Service %s/%s: %d endpoint slices, %d of %d endpoints ready", svc.Namespace, svc.Name, len(eps.Items), ready, all))
		}
	}
	if len(out) == 0 {
		return "no webhook configuration names a Service of " + r.name
	}
	return strings.Join(out, "; ")
}
