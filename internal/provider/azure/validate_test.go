package azure_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/azure"
)

// TestInvalidNamesTheServicesAtFault: Invalid names exactly the Services
// render would refuse, and what it leaves is written to the emulator: the
// long-named Services beyond the tag limit (the ones already tagged keep
// their tag), mixed backend ports, a backend that is no IPv4 address.
func TestInvalidNamesTheServicesAtFault(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	p := newProvider(t, emu, provider.Hooks{})
	long := func(i int) (string, string) {
		return fmt.Sprintf("ns-%02d-", i) + strings.Repeat("n", 57), strings.Repeat("s", 63)
	}
	lb := &model.LoadBalancer{Key: "lb-a"}
	// The last five Services are written first, so they hold tags already.
	for i := 50; i < 55; i++ {
		ns, name := long(i)
		lb.Listeners = append(lb.Listeners, listener(ns, name, 80, backends(8080, fmt.Sprintf("10.0.%d.1", i))...))
	}
	converge(t, p, lb)
	if _, err := p.Observe(context.Background(), "lb-a"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		ns, name := long(i)
		lb.Listeners = append(lb.Listeners, listener(ns, name, 80, backends(8080, fmt.Sprintf("10.0.%d.1", i))...))
	}
	lb.Listeners = append(lb.Listeners,
		listener("default", "ports", 80, append(backends(8080, "10.1.0.1"), backends(9090, "10.1.0.2")...)...),
		listener("default", "v6", 80, backends(8080, "fd00::1")...),
		listener("default", "ok", 80, backends(8080, "10.1.0.3")...))
	lb = model.Canonical(lb)

	bad := p.Invalid("lb-a", lb)
	// 50 tags: owner, created and 48 Services; 5 are tagged, so 43 of the
	// new 50 fit.
	want := map[string]bool{"default/ports": true, "default/v6": true}
	for i := 43; i < 50; i++ {
		ns, name := long(i)
		want[ns+"/"+name] = true
	}
	for svc, err := range bad {
		var ue *azure.UnrepresentableError
		if !want[svc] || !errors.As(err, &ue) {
			t.Errorf("%s reported invalid: %v", svc, err)
		}
	}
	for svc := range want {
		if bad[svc] == nil {
			t.Errorf("%s not reported invalid", svc)
		}
	}
	ok := &model.LoadBalancer{Key: "lb-a"}
	for _, l := range lb.Listeners {
		svc := l.Name[:strings.LastIndexByte(l.Name, '/')]
		if bad[svc] == nil {
			ok.Listeners = append(ok.Listeners, l)
		}
	}
	converge(t, p, ok)
	if _, err := p.Observe(context.Background(), "lb-a"); err != nil {
		t.Fatal(err)
	}
	if again := p.Invalid("lb-a", ok); len(again) != 0 {
		t.Errorf("what was written is invalid now: %v", again)
	}
}
