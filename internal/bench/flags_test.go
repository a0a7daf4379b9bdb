package bench

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
)

// TestFlagsChanged checks the line benches print on the configurations they
// build: what they set only to run here is left out, a flag and a setting
// without a flag are named with their shipped values.
func TestFlagsChanged(t *testing.T) {
	if got := FlagsChanged(controller.DefaultConfig()); got != "none" {
		t.Errorf("the shipped configuration: %q, want none", got)
	}
	cfg := benchConfig(nil) // its listeners, registry and logger: not settings
	cfg.HAProxy.Dir = t.TempDir()
	cfg.AddressPool, cfg.AddressMap = "127.0.128.0/17", labAddressMap
	if got, want := FlagsChanged(cfg), "--resync-period=1h0m0s (shipped: 10m0s)"; got != want {
		t.Errorf("benchConfig: %q, want %q", got, want)
	}
	cfg.Immediate = true
	cfg.HAProxy.ReloadTimeout = time.Minute
	cfg.Override.CoalesceWindow = -1
	want := "--immediate-removal=true (shipped: false), --resync-period=1h0m0s (shipped: 10m0s), HAProxy.ReloadTimeout=1m0s (shipped: unset, its package's default), Override.CoalesceWindow=-1ns (shipped: unset, its package's default)"
	if got := FlagsChanged(cfg); got != want {
		t.Errorf("with a flag and two settings:\n got %q\nwant %q", got, want)
	}
	// As hack/procmem's data-plane replica is started: site flags only.
	parsed, err := controller.ParseArgs([]string{"--address-pool=127.0.128.0/17", "--role=data-plane",
		"--haproxy-socket=/x/admin.sock", "--metrics-bind-address=127.0.0.1:1", "--pod-name=p"})
	if err != nil {
		t.Fatal(err)
	}
	if got := FlagsChanged(parsed); got != "none" {
		t.Errorf("site flags: %q, want none", got)
	}
}

// TestFlagsChangedNamesEachFlagOnce sets every flag that has a variable to
// another value: each must be named as a flag only, never again as the Go
// field behind it (which would happen if the field were not recognised as
// the flag's).
func TestFlagsChangedNamesEachFlagOnce(t *testing.T) {
	var cfg controller.Config
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	cfg.Flags(fs)
	set := 0
	fs.VisitAll(func(f *pflag.Flag) {
		v := map[string]string{"string": "x", "int": "7", "int32": "7", "float64": "7.5", "duration": "7s", "quantity": "7Mi"}[f.Value.Type()]
		if f.Value.Type() == "bool" {
			v = map[string]string{"true": "false", "false": "true"}[f.DefValue]
		}
		switch {
		case f.Value.Type() == "func":
			return // fs.Func's values hold no variable of their own
		case v == "":
			t.Errorf("--%s: a flag of type %s: give this test a value for it (and check that valueAddr finds its variable)", f.Name, f.Value.Type())
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			t.Fatalf("--%s=%s: %v", f.Name, v, err)
		}
		set++
	})
	got := FlagsChanged(cfg)
	for _, item := range strings.Split(got, ", ") {
		if !strings.HasPrefix(item, "--") {
			t.Errorf("%q: a flag's field named as a setting without a flag", item)
		}
	}
	if n := strings.Count(got, "--"); n != set-countSite(fs) {
		t.Errorf("%d flags named, want %d (every one set, less the site flags): %s", n, set-countSite(fs), got)
	}
}

func countSite(fs *pflag.FlagSet) int {
	n := 0
	for _, name := range SiteFlags {
		if f := fs.Lookup(name); f != nil && f.Value.Type() != "func" {
			n++
		}
	}
	return n
}

// TestSiteFlagsAreFlags keeps SiteFlags and siteFields to names the
// command has: a renamed flag would otherwise be listed as changed.
func TestSiteFlagsAreFlags(t *testing.T) {
	var cfg controller.Config
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	cfg.Flags(fs)
	for _, name := range SiteFlags {
		if fs.Lookup(name) == nil {
			t.Errorf("SiteFlags: --%s is not a flag of zerodrop controller", name)
		}
	}
	for _, path := range siteFields {
		if _, ok := reflect.TypeOf(cfg).FieldByName(path); !ok {
			t.Errorf("siteFields: controller.Config has no field %s", path)
		}
	}
}

// TestFlagsLine checks the line of a bench with two modes: what both
// changed once, then what one changed besides.
func TestFlagsLine(t *testing.T) {
	cfg := benchConfig(nil)
	incremental := newModeFlags("zerodrop (incremental)", cfg)
	cfg.Sync = "full"
	full := newModeFlags("upstream-like (--sync=full)", cfg)
	want := FlagsLine + "--resync-period=1h0m0s (shipped: 10m0s); upstream-like (--sync=full) also --sync=full (shipped: incremental)"
	if got := flagsLine(incremental, full); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got, want := flagsLine(newModeFlags("a", controller.DefaultConfig())), FlagsLine+"none"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
