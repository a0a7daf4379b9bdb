package drain

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestTerminatingWaitsForTheCache: the kubelet calls the hook as soon as it
// sees the deletion; a cache that sees it a moment later must not make the
// gate refuse (the pod would then stop while still in the load balancer).
func TestTerminatingWaitsForTheCache(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u1", Finalizers: []string{"test/keep"}}}
	tests := []struct {
		name     string
		query    string
		delete   bool
		wantCode int
	}{
		{name: "deletion seen late", query: "web", delete: true},
		{name: "never terminating", query: "web", wantCode: http.StatusConflict},
		{name: "unknown pod", query: "other", wantCode: http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithObjects(pod.DeepCopy()).Build()
			h := NewHandler(Options{Reader: c, PollInterval: 10 * time.Millisecond, CacheLag: 500 * time.Millisecond})
			if tc.delete {
				go func() {
					time.Sleep(150 * time.Millisecond)
					if err := c.Delete(context.Background(), pod.DeepCopy()); err != nil {
						t.Error(err)
					}
				}()
			}
			got, code, err := h.terminating(context.Background(), "ns", tc.query, "")
			if code != tc.wantCode {
				t.Fatalf("code %d (%v), want %d", code, err, tc.wantCode)
			}
			if tc.wantCode == 0 && (got == nil || got.DeletionTimestamp == nil) {
				t.Fatalf("got %v, want the terminating pod", got)
			}
		})
	}
}
