package bench

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/spf13/pflag"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
)

// FlagsLine is how every bench (and hack/procmem) starts the line it prints
// beside its figures, and what a figure block in the docs quotes
// (cmd/zerodrop's TestDocFigures looks for it).
const FlagsLine = "flags changed from the shipped defaults: "

// SiteFlags say where and as what a process runs, not how: the addresses
// and ports it binds, its state directory and the sockets of the HAProxy
// it attaches to, its provider, its role in the chart's data plane and its
// pod, the address pool and backend address map of its network, the Azure
// resources it is given. Every installation sets them for its own cluster (the chart
// does, per role), so FlagsChanged leaves them out: a bench that runs the
// shipped controller on loopback addresses says "none".
// TestSiteFlagsAreFlags keeps each a flag of the command.
var SiteFlags = []string{
	"metrics-bind-address", "health-probe-bind-address", "drain-bind-address", "state-bind-address",
	"haproxy-dir", "haproxy-socket", "haproxy-master-socket", "haproxy-config", "haproxy-validate-socket",
	"provider", "role", "pod-name", "pod-namespace", "pod-uid", "data-plane-namespace", "data-plane-selector",
	"address-pool", "backend-address-map",
	"azure-subscription-id", "azure-resource-group", "azure-subnet-id", "azure-location", "azure-load-balancers",
}

// siteFields are Config fields that follow a site flag rather than set
// anything: AddressPoolGiven is true whenever --address-pool is given.
var siteFields = []string{"AddressPoolGiven"}

// FlagsChanged names what cfg runs differently from `zerodrop controller`
// given no flag, for the line a bench prints beside its figures: each flag
// whose value differs from its default, as --name=value (shipped: default),
// then each setting without a flag (controller.Config's fields the flags do
// not fill: Override's, HAProxy's reload timeout, Azure's poll frequency,
// …) that differs from what the command leaves it at, as its Go path. The
// defaults are the command's own flag set's, read here, so the list cannot
// drift from them. Left out: SiteFlags, and fields holding the caller's
// objects rather than settings (pointers, interfaces, functions: the API
// server's config, a provider, a logger). "none" when nothing else differs.
func FlagsChanged(cfg controller.Config) string {
	if c := changedFlags(cfg); len(c) > 0 {
		return strings.Join(c, ", ")
	}
	return "none"
}

// changedFlags is FlagsChanged's list, one item per flag or setting.
func changedFlags(cfg controller.Config) []string {
	// The flag set is bound to got's fields: got holds the defaults after
	// Flags, then cfg, so each flag's value reads cfg's field.
	var got controller.Config
	fs := pflag.NewFlagSet("defaults", pflag.ContinueOnError)
	got.Flags(fs)
	def := got
	got = cfg
	site := map[string]bool{}
	for _, n := range SiteFlags {
		site[n] = true
	}
	var changed []string
	bound := map[uintptr]bool{}
	fs.VisitAll(func(f *pflag.Flag) {
		if p, ok := valueAddr(f.Value); ok {
			bound[p] = true
		}
		if site[f.Name] || f.Value.String() == f.DefValue {
			return
		}
		changed = append(changed, fmt.Sprintf("--%s=%s (shipped: %s)", f.Name, f.Value, quoteEmpty(f.DefValue)))
	})
	skip := map[string]bool{}
	for _, n := range siteFields {
		skip[n] = true
	}
	return append(changed, unflagged(reflect.ValueOf(&got).Elem(), reflect.ValueOf(&def).Elem(), "", bound, skip)...)
}

// valueAddr is the address of the variable a flag's value sets: pflag's
// scalar values (string, bool, int, duration, …) are that variable's
// address, converted. A value of another kind (fs.Func's) has none, and
// its field is named by its Go path instead.
func valueAddr(v pflag.Value) (uintptr, bool) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return 0, false
	}
	return rv.Pointer(), true
}

// unflagged lists the settings under got that no flag is bound to and that
// differ from def, by Go path.
func unflagged(got, def reflect.Value, path string, bound map[uintptr]bool, skip map[string]bool) []string {
	var out []string
	for i := 0; i < got.NumField(); i++ {
		sf := got.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		name := path + sf.Name
		g, d := got.Field(i), def.Field(i)
		switch g.Kind() {
		case reflect.Pointer, reflect.Interface, reflect.Func, reflect.Chan, reflect.UnsafePointer:
			continue // the caller's objects, not settings
		case reflect.Struct:
			out = append(out, unflagged(g, d, name+".", bound, skip)...)
			continue
		}
		if skip[name] || bound[g.Addr().Pointer()] || reflect.DeepEqual(g.Interface(), d.Interface()) {
			continue
		}
		shipped := fmt.Sprint(d.Interface())
		if d.IsZero() {
			shipped = "unset, its package's default"
		}
		out = append(out, fmt.Sprintf("%s=%v (shipped: %s)", name, g.Interface(), shipped))
	}
	return out
}

func quoteEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return s
}
