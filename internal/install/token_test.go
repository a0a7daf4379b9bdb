package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/dataplane/stateauth"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// saDir is where the kubelet's automount puts a pod's ServiceAccount
// token, CA and namespace, and where client-go's in-cluster configuration
// reads them.
const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// TestChartDataPlaneTokenOnlyInController: the data-plane pod mounts no
// ServiceAccount token by default, and of its containers only `controller`
// has one — the kubelet's own projected volume (a pod-bound token, the
// cluster's CA, the namespace) at the usual path. The Internet-facing
// `haproxy` container has none.
func TestChartDataPlaneTokenOnlyInController(t *testing.T) {
	ds := typed[appsv1.DaemonSet](t, find(t, render(t, haproxyValues...), "DaemonSet", "zerodrop-data-plane"))
	spec := ds.Spec.Template.Spec
	if a := spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("data-plane pod automountServiceAccountToken %v: want false (the kubelet would mount the token in every container)", a)
	}
	for _, c := range spec.Containers {
		mounts := credentialMounts(spec, c)
		switch c.Name {
		case "haproxy":
			if len(mounts) > 0 {
				t.Errorf("the haproxy container mounts credentials: %v", mounts)
			}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					t.Errorf("the haproxy container reads Secret %s into $%s", e.ValueFrom.SecretKeyRef.Name, e.Name)
				}
			}
			if len(c.EnvFrom) > 0 {
				t.Errorf("the haproxy container has envFrom %v", c.EnvFrom)
			}
		case "controller":
			if len(mounts) != 1 || mounts[0] != "kube-api-access at "+saDir+" (read-only)" {
				t.Fatalf("the controller container mounts credentials %v: want the projected kube-api-access volume at %s, read-only", mounts, saDir)
			}
			checkAPIAccessVolume(t, volumeNamed(spec, "kube-api-access"))
		default:
			t.Errorf("unexpected data-plane container %s", c.Name)
		}
	}
}

// credentialMounts are the mounts of c that carry credentials: a secret or
// a ServiceAccount token volume, or anything mounted where a token is read.
func credentialMounts(spec corev1.PodSpec, c corev1.Container) []string {
	var out []string
	for _, m := range c.VolumeMounts {
		v := volumeNamed(spec, m.Name)
		secret := v != nil && v.Secret != nil
		if v != nil && v.Projected != nil {
			for _, s := range v.Projected.Sources {
				secret = secret || s.ServiceAccountToken != nil || s.Secret != nil
			}
		}
		mp := filepath.Clean(m.MountPath)
		if secret || strings.HasPrefix(mp, "/var/run/secrets") || strings.HasPrefix(mp, "/run/secrets") {
			ro := ""
			if m.ReadOnly {
				ro = " (read-only)"
			}
			out = append(out, fmt.Sprintf("%s at %s%s", m.Name, m.MountPath, ro))
		}
	}
	return out
}

func volumeNamed(spec corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

// checkAPIAccessVolume wants what the kubelet's automount gives: a token for
// the API server (no audience of its own) bound to the pod, with a life the
// API server accepts, the cluster's CA and the namespace.
func checkAPIAccessVolume(t *testing.T, v *corev1.Volume) {
	t.Helper()
	if v == nil || v.Projected == nil {
		t.Fatalf("volume kube-api-access %+v: want a projected volume", v)
	}
	var token, ca, ns bool
	for _, s := range v.Projected.Sources {
		switch {
		case s.ServiceAccountToken != nil:
			st := s.ServiceAccountToken
			exp := st.ExpirationSeconds
			token = st.Path == "token" && st.Audience == "" && exp != nil && *exp >= 600 && *exp <= 24*3600
			if !token {
				t.Errorf("serviceAccountToken %+v: want path token, the API server's audience, an expiration from 10 minutes to a day", st)
			}
		case s.ConfigMap != nil:
			ca = s.ConfigMap.Name == "kube-root-ca.crt" && len(s.ConfigMap.Items) == 1 &&
				s.ConfigMap.Items[0].Key == "ca.crt" && s.ConfigMap.Items[0].Path == "ca.crt"
		case s.DownwardAPI != nil:
			ns = len(s.DownwardAPI.Items) == 1 && s.DownwardAPI.Items[0].Path == "namespace" &&
				s.DownwardAPI.Items[0].FieldRef != nil && s.DownwardAPI.Items[0].FieldRef.FieldPath == "metadata.namespace"
		default:
			t.Errorf("kube-api-access projects more than the kubelet's automount: %+v", s)
		}
	}
	if !token || !ca || !ns {
		t.Errorf("kube-api-access: token %v, CA %v, namespace %v: want all three", token, ca, ns)
	}
}

// TestChartDataPlaneProjectedTokenGetsStateCertificate plays the kubelet for
// the controller container's kube-api-access volume on a real API server —
// the rendered pod created there (which validates the projection), the
// token requested as the kubelet does (the source's audience and expiration,
// bound to the pod), the CA from kube-root-ca.crt, the namespace — and
// connects as client-go's in-cluster configuration does from those files:
// the replica's side of the state certificate, with that client, gets its
// certificate from the control role's signer, which signs only for a
// request made with a token bound to the replica's own pod.
func TestChartDataPlaneProjectedTokenGetsStateCertificate(t *testing.T) {
	ds := typed[appsv1.DaemonSet](t, find(t, render(t, haproxyValues...), "DaemonSet", "zerodrop-data-plane"))
	spec := ds.Spec.Template.Spec
	var zc *corev1.Container
	for i := range spec.Containers {
		if spec.Containers[i].Name == "controller" {
			zc = &spec.Containers[i]
		}
	}
	if zc == nil {
		t.Fatal("no controller container")
	}
	var vol *corev1.Volume
	for _, m := range zc.VolumeMounts {
		if filepath.Clean(m.MountPath) == saDir {
			vol = volumeNamed(spec, m.Name)
		}
	}
	if vol == nil || vol.Projected == nil {
		t.Fatalf("the controller container mounts no projected volume at %s: %v", saDir, zc.VolumeMounts)
	}

	restCfg := controlplane.Start(t)
	c := testutil.Client(t, restCfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// kube-controller-manager's root CA publisher, which this control plane
	// does not run.
	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "kube-root-ca.crt"},
		Data: map[string]string{"ca.crt": string(restCfg.CAData)}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	testutil.AdminServiceAccount(t, restCfg, namespace, spec.ServiceAccountName)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "zerodrop-data-plane-t0k3n", Labels: ds.Spec.Template.Labels},
		Spec: spec}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatalf("create the chart's data-plane pod: %v", err)
	}

	dir := t.TempDir()
	project(ctx, t, restCfg, c, pod, vol.Projected, dir)
	if ns, err := os.ReadFile(filepath.Join(dir, "namespace")); err != nil || string(ns) != namespace {
		t.Errorf("namespace file %q (%v): want %s", ns, err, namespace)
	}
	// client-go's rest.InClusterConfig, from dir instead of saDir.
	inCluster := &rest.Config{Host: restCfg.Host, BearerTokenFile: filepath.Join(dir, "token"),
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(dir, "ca.crt")}}
	podClient, err := client.New(inCluster, client.Options{})
	if err != nil {
		t.Fatal(err)
	}

	stateAuthority(t, restCfg, namespace, labels.SelectorFromSet(ds.Spec.Selector.MatchLabels))
	r := &stateauth.Replica{Client: podClient, Reader: podClient, PodNamespace: pod.Namespace, PodName: pod.Name,
		PodUID: pod.UID, Log: testr.New(t)}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Start(rctx) }()
	t.Cleanup(func() { rcancel(); <-done })
	testutil.Eventually(t, 60*time.Second, "the replica's state certificate, requested with the projected token", func() (bool, string) {
		return r.Ready(), "not issued yet"
	})
}

// project writes the files of a projected volume of pod into dir as the
// kubelet does, for the sources the chart uses.
func project(ctx context.Context, t *testing.T, cfg *rest.Config, c client.Client, pod *corev1.Pod, p *corev1.ProjectedVolumeSource, dir string) {
	t.Helper()
	write := func(path string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, path), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range p.Sources {
		switch {
		case s.ServiceAccountToken != nil:
			req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
				ExpirationSeconds: s.ServiceAccountToken.ExpirationSeconds,
				BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}
			if a := s.ServiceAccountToken.Audience; a != "" {
				req.Spec.Audiences = []string{a}
			}
			tr, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, req, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("the kubelet's token request for %s: %v", s.ServiceAccountToken.Path, err)
			}
			write(s.ServiceAccountToken.Path, []byte(tr.Status.Token))
		case s.ConfigMap != nil:
			var cm corev1.ConfigMap
			if err := c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: s.ConfigMap.Name}, &cm); err != nil {
				t.Fatal(err)
			}
			for _, it := range s.ConfigMap.Items {
				write(it.Path, []byte(cm.Data[it.Key]))
			}
		case s.DownwardAPI != nil:
			for _, it := range s.DownwardAPI.Items {
				if it.FieldRef == nil || it.FieldRef.FieldPath != "metadata.namespace" {
					t.Fatalf("downward API item %+v: this test projects metadata.namespace only", it)
				}
				write(it.Path, []byte(pod.Namespace))
			}
		default:
			t.Fatalf("projected source %+v: not one the kubelet's automount has", s)
		}
	}
}
