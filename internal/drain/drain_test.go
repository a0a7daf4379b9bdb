package drain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
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
		name    string
		query   string
		delete  bool
		refused bool
	}{
		{name: "deletion seen late", query: "web", delete: true},
		{name: "never terminating", query: "web", refused: true},
		{name: "unknown pod", query: "other", refused: true},
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
			got, err := h.terminating(context.Background(), "ns", tc.query, "")
			if errors.Is(err, errRefused) != tc.refused {
				t.Fatalf("got %v, refused want %v", err, tc.refused)
			}
			if !tc.refused && (got == nil || got.DeletionTimestamp == nil) {
				t.Fatalf("got %v, want the terminating pod", got)
			}
		})
	}
}

// TestServerAnswersCallsInFlightAtShutdown: a replica that stops returns from
// Start at once (the manager goes on and releases the lease) but still
// answers the preStop calls it holds; Wait returns once they are answered.
func TestServerAnswersCallsInFlightAtShutdown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	entered := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		time.Sleep(500 * time.Millisecond)
		fmt.Fprintln(w, "drained")
	})
	s := &Server{Addr: addr, Handler: slow, Logger: logr.Discard(), ShutdownTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- s.Start(ctx) }()

	answer := make(chan string, 1)
	go func() {
		var resp *http.Response
		var err error
		for i := 0; i < 100; i++ { // the listener may not be up yet
			if resp, err = http.Get("http://" + addr + Path + "?pod=ns/web"); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			answer <- err.Error()
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		answer <- fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}()
	<-entered
	cancel()
	select {
	case err := <-started:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Start did not return after its context ended")
	}
	select {
	case got := <-answer:
		t.Fatalf("answered before Start returned? %q", got)
	default:
	}
	s.Wait()
	if got := <-answer; got != "200 drained" {
		t.Fatalf("call in flight at shutdown got %q, want 200 drained", got)
	}
}
