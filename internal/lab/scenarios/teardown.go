package scenarios

import (
	"context"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// teardown stops the run's controller pods and HAProxy and ends its pods.
func (r *run) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bg := metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
	if r.ctrls != nil {
		_ = r.lab.cp.Client.AppsV1().Deployments(ctrlNamespace).DeleteCollection(ctx, bg,
			metav1.ListOptions{LabelSelector: labelRun + "=" + strconv.Itoa(r.id)})
		r.lab.agent.Abandon(func(p *corev1.Pod) bool {
			return p.Namespace == ctrlNamespace && p.Labels[labelRun] == strconv.Itoa(r.id)
		})
	}
	if r.stop != nil {
		r.stop()
	}
	r.world.Stop()
	r.lab.agent.Abandon(func(p *corev1.Pod) bool { return p.Namespace == r.ns })
	_ = r.lab.cp.Client.AppsV1().Deployments(r.ns).Delete(ctx, appName, bg)
	for _, n := range r.cordoned {
		_ = r.lab.setUnschedulable(ctx, n, false)
	}
	for _, n := range r.tainted {
		if _, err := r.lab.setLeaving(ctx, n, "", false); err != nil {
			r.lab.logf("%s: take the leaving mark off %s: %v", r.name(), n, err)
		}
	}
}
