package install

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	appsv1 "k8s.io/api/apps/v1"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestChartHAProxyTellsWhyAReloadIsRefused runs the data plane's HAProxy as
// its container does (`zerodrop haproxy`, TestChartHAProxyWorkersNotRoot)
// and writes a Service whose address is not on this host (TEST-NET-1),
// which HAProxy refuses to bind: the replica's error names the listener
// that cannot bind, read from HAProxy's own alerts. That is what lets a
// refused reload of thousands of Services fail the one HAProxy names and
// serve the rest in one more reload, where without the alerts ("(no log)":
// the container's output reached only the kubelet) it halves the group a
// dozen times. (A port another process holds is refused before any reload,
// TestHeldPortRefusedWithoutReload.)
func TestChartHAProxyTellsWhyAReloadIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the data plane's HAProxy starts as root")
	}
	ds := typed[appsv1.DaemonSet](t, find(t, render(t, haproxyValues...), "DaemonSet", "zerodrop-data-plane"))
	hc := ds.Spec.Template.Spec.Containers[0]
	bin := zerodropBinary(t)
	dir := filepath.Join(t.TempDir(), "haproxy")
	t.Cleanup(func() { testutil.StopHAProxy(t, dir) })
	runHAProxyContainer(t, hc, bin, dir)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	admin, master, config, err := haproxy.Paths(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := haproxy.New(ctx, haproxy.Options{AdminSocket: admin, MasterSocket: master, ConfigFile: config,
		Log: testr.New(t), ReloadTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })

	const key, addr = "default/elsewhere", "192.0.2.81"
	want := &model.LoadBalancer{Key: key, Listeners: []model.Listener{{Name: key + "/http", Address: addr, Port: 8081, Protocol: model.TCP,
		Probe:    model.Probe{Kind: model.ProbeTCP, IntervalMillis: 300, Rise: 1, Fall: 2},
		Backends: []model.Backend{httpBackend(t)}}}}
	obs, err := p.Observe(ctx, key)
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	err = p.Apply(ctx, model.Diff(obs, want))
	if err == nil || !strings.Contains(err.Error(), "cannot bind socket") || !strings.Contains(err.Error(), addr+":8081") {
		t.Fatalf("Apply of a Service whose address is not on this host: %v\nwant HAProxy's alert that its listener cannot bind %s:8081", err, addr)
	}
}
