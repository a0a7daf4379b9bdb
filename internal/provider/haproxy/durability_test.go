package haproxy

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
)

// TestFailedMirrorIsRetried: a runtime change whose mirror into the
// configuration file failed is mirrored later, although the next plan is
// empty (the runtime already matches), so a restart of HAProxy from the
// configuration file keeps it.
func TestFailedMirrorIsRetried(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	p := startOwned(t, dir, nil)
	bs := startBackends(t, 2, "127.0.12")
	const key, lbAddr = "default/mirror", "127.0.0.62"
	l := listenerOf(key, "tcp-80", lbAddr, freePort(t, lbAddr), bs[:1])
	desired := &model.LoadBalancer{Key: key, Listeners: []model.Listener{l}}
	applyDiff(t, p, desired)

	// The configuration cannot be replaced while a directory stands in its
	// place (a failure root cannot bypass, unlike permissions).
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
	} else {
		t.Logf("apply with the configuration unwritable: %v", err)
	}
	if err := os.Remove(cfgFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(cfgFile+".saved", cfgFile); err != nil {
		t.Fatal(err)
	}

	// What the controller does next: observe, and find nothing to do.
	added := serverName(bs[1].addr, bs[1].port)
	eventually(t, 30*time.Second, "the configuration file to get the server added at run time", func() error {
		obs, err := p.Observe(ctx, key)
		if err != nil {
			return err
		}
		if plan := model.Diff(obs, desired); !plan.Empty() {
			return fmt.Errorf("runtime does not match: %s", plan)
		}
		cfg, err := os.ReadFile(cfgFile)
		if err != nil {
			return err
		}
		if !strings.Contains(string(cfg), added) {
			return fmt.Errorf("server %s not in the configuration file", added)
		}
		return nil
	})

	// A restart of HAProxy from the configuration file keeps the change.
	if err := p.Close(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	p2 := startOwned(t, dir, nil)
	obs, err = p2.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if plan := model.Diff(obs, desired); !plan.Empty() {
		t.Fatalf("after a restart from the configuration file: diff %s", plan)
	}
}
