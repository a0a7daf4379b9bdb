package azurearm_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
)

// TestEndedOperationAnswersAgain: a client that asks again for an
// operation that has ended — azcore retries a 500 on its own — gets the
// same answer, not a 404 that would say the operation never existed (a
// rule-health reader took that 404 for "operation not supported").
func TestEndedOperationAnswersAgain(t *testing.T) {
	emu := azurearm.New(azurearm.Options{PollSteps: 1})
	c := newClients(t, emu)
	if _, err := put(context.Background(), c, simpleLB(nil), nil); err != nil {
		t.Fatal(err)
	}
	asked := 0
	emu.SetRuleHealth(func(_, _, _ string) ([]azurearm.BackendHealth, error) {
		asked++
		return nil, errors.New("no probe data yet")
	})
	do := func(method, u string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, u, nil)
		req.Header.Set("Authorization", "Bearer token")
		rec := httptest.NewRecorder()
		emu.ServeHTTP(rec, req)
		return rec
	}
	start := do(http.MethodPost, "/subscriptions/"+sub+"/resourceGroups/"+rg+
		"/providers/Microsoft.Network/loadBalancers/lb/loadBalancingRules/rule/health?api-version=2025-05-01")
	if start.Code != http.StatusAccepted {
		t.Fatalf("start of the rule-health operation: %d %s", start.Code, start.Body)
	}
	loc, err := url.Parse(start.Header().Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		rec := do(http.MethodGet, loc.RequestURI())
		if rec.Code != http.StatusInternalServerError {
			t.Errorf("GET %d of the ended operation's result: %d %s, want its 500 again", i+1, rec.Code, rec.Body)
		}
	}
	if asked != 1 {
		t.Errorf("the data plane was asked %d times for one operation, want once", asked)
	}
}
