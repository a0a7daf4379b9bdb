package azure

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// TestOnWriteNamesTheWrite: the Azure traffic world is a world.WriteWatcher
// (kill-mid-plan's hook): the watcher is called inside each ARM write that
// lands, with that write's method and resource, and no more once removed.
func TestOnWriteNamesTheWrite(t *testing.T) {
	a := &run{emu: azurearm.New(azurearm.Options{Seed: 1})}
	var ww world.WriteWatcher = a
	put := func(name string) int {
		req := httptest.NewRequest(http.MethodPut, "/subscriptions/"+azSub+"/resourceGroups/"+azGroup+
			"/providers/Microsoft.Network/loadBalancers/"+name+"?api-version=2025-05-01",
			strings.NewReader(`{"location":"`+azLocation+`","sku":{"name":"Standard"}}`))
		req.Header.Set("Authorization", "Bearer token")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		a.emu.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := put("lb-before"); code >= 300 {
		t.Fatalf("PUT before watching: %d", code)
	}
	var verbs []string
	ww.OnWrite(func(verb string) { verbs = append(verbs, verb) })
	for _, name := range []string{"lb-1", "lb-2"} {
		if code := put(name); code >= 300 {
			t.Fatalf("PUT %s: %d", name, code)
		}
	}
	ww.OnWrite(nil)
	if code := put("lb-after"); code >= 300 {
		t.Fatalf("PUT after watching: %d", code)
	}
	if len(verbs) != 2 || !strings.HasPrefix(verbs[0], "PUT ") || !strings.HasSuffix(verbs[0], "/lb-1") || !strings.HasSuffix(verbs[1], "/lb-2") {
		t.Errorf("watched %q: want the PUTs of lb-1 and lb-2 only, each named", verbs)
	}
}
