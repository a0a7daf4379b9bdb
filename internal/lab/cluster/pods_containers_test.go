package cluster

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestExpand(t *testing.T) {
	env := []string{"POD_NAMESPACE=zerodrop-system", "A=1", "A=2"}
	for in, want := range map[string]string{
		"--ns=$(POD_NAMESPACE)":   "--ns=zerodrop-system",
		"$(A)":                    "2", // the last one wins
		"$(MISSING)":              "$(MISSING)",
		"$$(POD_NAMESPACE)":       "$(POD_NAMESPACE)",
		"a$$b":                    "a$b",
		"$(unterminated":          "$(unterminated",
		"plain $ sign":            "plain $ sign",
		"x$(A)y$(POD_NAMESPACE)z": "x2yzerodrop-systemz",
		"trailing $":              "trailing $",
	} {
		if got := expand(in, env); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestContainerEnvVars(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}, Spec: corev1.PodSpec{NodeName: "n"}}
	c := &corev1.Container{Env: []corev1.EnvVar{
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "LEASE", Value: "$(POD_NAMESPACE)/lease"},
	}}
	env := containerEnvVars(pod, c, "198.19.1.2", "198.18.0.11")
	for _, want := range []string{"HOSTNAME=p", "POD_NAMESPACE=ns", "NODE=n", "IP=198.19.1.2", "LEASE=ns/lease",
		"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=6443"} {
		if !slices.Contains(env, want) {
			t.Errorf("env %q lacks %s", env, want)
		}
	}
	if got := expandArgs([]string{"--leader-election-namespace=$(POD_NAMESPACE)"}, env); got[0] != "--leader-election-namespace=ns" {
		t.Errorf("args expanded to %q", got)
	}
}

func TestChartImage(t *testing.T) {
	for image, want := range map[string]bool{
		"zerodrop:0.1.0":                   true,
		"registry.example/zerodrop:0.1.0":  true,
		"zerodrop-dataplane:0.1.0":         true,
		"zerodrop-dataplane@sha256:abc":    true,
		"host:5000/team/zerodrop":          true,
		ControllerImage:                    false, // the lab's own build
		"other/zerodrop:dev":               true,
		"lab/web:1":                        false,
		"zerodrop-evil:1":                  false,
		"host:5000/zerodrop-dataplane/x:1": false,
	} {
		if got := chartImage(image); got != want {
			t.Errorf("chartImage(%q) = %v, want %v", image, got, want)
		}
	}
	mixed := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Image: "zerodrop:1"}, {Image: "lab/web:1"}}}}
	if chartPod(mixed) {
		t.Error("a pod with a container of another image counts as the chart's")
	}
}

func TestMountScript(t *testing.T) {
	r := &podRuntime{uid: "u", env: podEnv{containers: &ContainerEnv{ImageDir: "/lab/image", Dir: "/lab/pods"}}}
	c := &corev1.Container{VolumeMounts: []corev1.VolumeMount{
		{Name: "certs", MountPath: "/tmp/k8s-webhook-server/serving-certs", ReadOnly: true},
		{Name: "tmp", MountPath: "/tmp"},
		{Name: "state", MountPath: "/run/zerodrop"},
	}}
	script, err := mountScript(r, c)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(script, "\n")
	idx := func(s string) int {
		i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, s) })
		if i < 0 {
			t.Fatalf("script lacks %q:\n%s", s, script)
		}
		return i
	}
	// Every volume is staged before anything is mounted over /tmp (which
	// hides the lab's directories), and a mount goes after its parent.
	stageState := idx("mount --bind '/lab/pods/u/v/state' '/run/.lab/volumes/state'")
	overTmp := idx("mount --bind '/run/.lab/volumes/tmp' '/tmp'")
	certs := idx("mount --bind '/run/.lab/volumes/certs' '/tmp/k8s-webhook-server/serving-certs'")
	if !(stageState < overTmp && overTmp < certs) {
		t.Errorf("mount order wrong:\n%s", script)
	}
	idx("mount -o remount,bind,ro '/tmp/k8s-webhook-server/serving-certs'")
	idx("mount --bind '/lab/pods/u/sa' /run/secrets/kubernetes.io/serviceaccount")
	if lines[len(lines)-2] != "cd '/'" {
		t.Errorf("the container does not start in / (the lab's directory may be under a mount): %q", lines[len(lines)-2])
	}
	if lines[len(lines)-1] != `exec "$@"` {
		t.Errorf("script does not end in exec: %q", lines[len(lines)-1])
	}
	if _, err := mountScript(r, &corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "x", MountPath: "/var/lib/x"}}}); err == nil {
		t.Error("a mount on the host's root filesystem was accepted")
	}
}
