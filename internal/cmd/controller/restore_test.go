package controller

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestHAProxyRestoredByController: the controller's readiness includes its
// HAProxy ("haproxy" in /readyz), and when an HAProxy worker is killed —
// which takes its master with it — the controller starts HAProxy again from
// its files and is ready again.
func TestHAProxyRestoredByController(t *testing.T) {
	restCfg := controlplane.Start(t)
	dir := t.TempDir()
	t.Cleanup(func() { testutil.StopHAProxy(t, dir) })
	probes := freeAddr(t)
	cfg := haproxyConfig(restCfg, dir, "127.0.105.0/24")
	cfg.ProbeAddr = probes
	startController(t, cfg)
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + probes + "/readyz?verbose")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testutil.Eventually(t, 60*time.Second, "ready, with HAProxy checked", func() (bool, string) {
		code, body := readyz()
		return code == http.StatusOK && strings.Contains(body, "[+]haproxy ok"), fmt.Sprint(code, body)
	})

	// A reader of the same HAProxy, to find and kill its worker.
	watch, err := haproxy.New(context.Background(), haproxy.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	master, workers, _, err := watch.Procs(context.Background())
	if err != nil || len(workers) == 0 {
		t.Fatalf("procs: %v %v", workers, err)
	}
	if err := syscall.Kill(workers[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "HAProxy started again by the controller", func() (bool, string) {
		m, ws, _, err := watch.Procs(context.Background())
		return err == nil && m != master && len(ws) > 0, fmt.Sprint(m, ws, err)
	})
	testutil.Eventually(t, 30*time.Second, "ready again", func() (bool, string) {
		code, body := readyz()
		return code == http.StatusOK, fmt.Sprint(code, body)
	})
}

// haproxyConfig is a controller of its own HAProxy in dir, frontends from
// pool: one worker, no resync during a test, metrics and probes off, its
// metrics on a registry of its own.
func haproxyConfig(restCfg *rest.Config, dir, pool string) Config {
	return Config{RESTConfig: restCfg, Provider: "haproxy", Sync: "incremental", Workers: 1,
		AddressPool: pool, ResyncPeriod: time.Hour, MetricsAddr: "0", ProbeAddr: "0",
		HAProxy: haproxy.Options{Dir: dir}, Registerer: prometheus.NewRegistry()}
}

// startController runs cfg until the test ends; it must then stop cleanly.
func startController(t *testing.T, cfg Config) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunConfig(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	})
}
