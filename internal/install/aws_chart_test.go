package install

import (
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestChartAWS: provider=aws renders the gates-only controller the command
// accepts (its own parser and validation), with the aws.* values as its
// flags, the IRSA role on the ServiceAccount when given, no data plane, and
// a render without aws.region fails naming it.
func TestChartAWS(t *testing.T) {
	objs := render(t, "provider=aws", "aws.region=eu-west-1", "aws.clusterID=prod", "aws.propagation=40s",
		"aws.roleARN=arn:aws:iam::111122223333:role/zerodrop")
	d := typed[appsv1.Deployment](t, find(t, objs, "Deployment", "zerodrop"))
	cfg, args := controllerFlags(t, d)
	if cfg.Provider != "aws" || !slices.Contains(args, "--provider=aws") {
		t.Errorf("provider %q (args %q): want --provider=aws", cfg.Provider, args)
	}
	if cfg.AWS.Region != "eu-west-1" || cfg.AWS.ClusterID != "prod" || cfg.AWS.Propagation != 40*time.Second || cfg.AWS.Endpoint != "" {
		t.Errorf("aws flags %+v: not the values'", cfg.AWS)
	}
	sa := typed[corev1.ServiceAccount](t, find(t, objs, "ServiceAccount", "zerodrop"))
	if got := sa.Annotations["eks.amazonaws.com/role-arn"]; got != "arn:aws:iam::111122223333:role/zerodrop" {
		t.Errorf("ServiceAccount role-arn annotation %q: want aws.roleARN", got)
	}
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" {
			t.Errorf("provider=aws renders DaemonSet %s: the NLBs are the cloud's, there is no data plane", o.GetName())
		}
	}

	// Without a role: no annotation (the SDK's default chain).
	objs = render(t, "provider=aws", "aws.region=eu-west-1")
	sa = typed[corev1.ServiceAccount](t, find(t, objs, "ServiceAccount", "zerodrop"))
	if len(sa.Annotations) != 0 {
		t.Errorf("ServiceAccount annotations %v without aws.roleARN: want none", sa.Annotations)
	}
	d = typed[appsv1.Deployment](t, find(t, objs, "Deployment", "zerodrop"))
	if cfg, _ := controllerFlags(t, d); cfg.AWS.ClusterID != "" || cfg.AWS.Propagation != 35*time.Second {
		t.Errorf("aws flags %+v: want no cluster ID and the default propagation", cfg.AWS)
	}

	if _, err := template(t, "provider=aws"); err == nil || !strings.Contains(err.Error(), "aws.region") {
		t.Errorf("provider=aws without aws.region: err %v, want a failure naming aws.region", err)
	}
}
