package haproxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"zerodrop.dev/zerodrop/internal/dataplane"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// TestStateReadMakesNoWrite: the data-plane state endpoint only reads. A
// replica whose configuration file fell behind its runtime (a failed mirror)
// catches up in its own reconcile; a read of its state by the control role
// must not be what writes the file (issue 28: a read that writes is a way
// for anyone who reaches the endpoint to make the replica write).
func TestStateReadMakesNoWrite(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	p := startOwned(t, dir, nil)
	bs := startBackends(t, 2, "127.0.13")
	const key, lbAddr = "default/stateread", "127.0.0.63"
	l := listenerOf(key, "tcp-80", lbAddr, freePort(t, lbAddr), bs[:1])
	desired := &model.LoadBalancer{Key: key, Listeners: []model.Listener{l}}
	applyDiff(t, p, desired)

	// Leave the configuration file behind the runtime, as
	// TestFailedMirrorIsRetried does.
	cfgFile := p.ConfigFile()
	if err := os.Rename(cfgFile, cfgFile+".saved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(cfgFile, 0o700); err != nil {
		t.Fatal(err)
	}
	l.Backends = append(l.Backends, bs[1].backend())
	desired.Listeners = []model.Listener{l}
	obs, err := p.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(ctx, model.Diff(obs, desired)); err == nil {
		t.Fatal("Apply reported success although the configuration could not be written")
	}
	if err := os.Remove(cfgFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(cfgFile+".saved", cfgFile); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	added := serverName(bs[1].addr, bs[1].port)
	if strings.Contains(string(before), added) {
		t.Fatalf("server %s already in the configuration file", added)
	}

	srv := httptest.NewServer(dataplane.StateHandler(p))
	defer srv.Close()
	for _, path := range []string{dataplane.LoadBalancerPath, dataplane.BackendsPath} {
		resp, err := http.Get(srv.URL + path + "?key=" + key)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
	}
	after, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Fatal("a read of the state endpoint wrote the configuration file")
	}

	// The replica's own reconcile (Observe) still catches up.
	if _, err := p.Observe(ctx, key); err != nil {
		t.Fatal(err)
	}
	after, err = os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(after), added) {
		t.Fatalf("Observe did not mirror the runtime: server %s not in the configuration file", added)
	}
}

// TestCancelledReaderDoesNotFailSharedRead: concurrent reads share one
// runtime snapshot. The caller that started it goes away (a state endpoint
// client that disconnects mid-read): the others, among them the replica's
// own reconcile, must still get the snapshot, not the first caller's
// cancellation.
func TestCancelledReaderDoesNotFailSharedRead(t *testing.T) {
	dir := t.TempDir()
	owner := startOwned(t, dir, nil)
	bs := startBackends(t, 1, "127.0.14")
	const key, lbAddr = "default/sharedread", "127.0.0.64"
	applyDiff(t, owner, &model.LoadBalancer{Key: key, Listeners: []model.Listener{
		listenerOf(key, "tcp-80", lbAddr, freePort(t, lbAddr), bs)}})

	// A reader whose first runtime read waits until released: the shared
	// read is in flight for as long as the test wants.
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var armed atomic.Bool
	hooks := provider.Hooks{Read: func(op string) {
		if op != "show-stat" || !armed.Load() {
			return
		}
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			<-release
		}
	}}
	p, err := New(testContext(t), Options{Dir: dir, Log: testr.New(t), Hooks: hooks, ReadBatchWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	armed.Store(true)

	first, cancel := context.WithCancel(testContext(t))
	firstErr := make(chan error, 1)
	go func() {
		_, err := p.Backends(first, key)
		firstErr <- err
	}()
	<-entered
	second := make(chan error, 1)
	var got []provider.BackendStatus
	go func() {
		var err error
		got, err = p.Backends(testContext(t), key)
		second <- err
	}()
	// The second reader joins the read in flight (it cannot start its own
	// while one is in flight); then the first goes away.
	time.Sleep(200 * time.Millisecond)
	cancel()
	close(release)
	if err := <-firstErr; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("first reader: %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("the second reader failed with the first reader's cancellation: %v", err)
	}
	if len(got) != 1 {
		t.Fatalf("second reader: %d backends, want 1", len(got))
	}
}
