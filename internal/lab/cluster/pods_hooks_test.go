package cluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestHookSendsHTTPHeaders: the kubelet stand-in sends an httpGet action's
// httpHeaders, as the kubelet does — the drain relay refuses a hook call
// without the pod's token header, so a stand-in that dropped them failed
// every drain hook of the lab's pods.
func TestHookSendsHTTPHeaders(t *testing.T) {
	var got http.Header
	var host string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, host = r.Header.Clone(), r.Host
	}))
	defer srv.Close()
	headers := []corev1.HTTPHeader{{Name: "X-Zerodrop-Relay-Token", Value: "t0ken"}, {Name: "Host", Value: "drain.example"}}
	code, _, err := httpGetDetail(context.Background(), srv.Client(), srv.URL+"/drain", headers)
	if err != nil || code != http.StatusOK {
		t.Fatalf("hook: %d %v", code, err)
	}
	if got.Get("X-Zerodrop-Relay-Token") != "t0ken" || host != "drain.example" {
		t.Errorf("the hook sent headers %v to host %q; want the action's token header, to host drain.example", got, host)
	}
	if code, _, err := httpGetDetail(context.Background(), srv.Client(), srv.URL+"/ready", headers[:1]); err != nil || code != http.StatusOK {
		t.Fatalf("probe: %d %v", code, err)
	}
	if got.Get("X-Zerodrop-Relay-Token") != "t0ken" {
		t.Errorf("the probe sent headers %v; want the action's", got)
	}
}
