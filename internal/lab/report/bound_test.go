package report

import "testing"

// TestPromiseAt: the published bounds at the acceptance sweep's points
// (docs/azure.md): zerodrop must hold at 1 s and 10 s with 0 s or 5 s
// propagation and not at 30 s or from 10 s propagation; the gates at every point with
// the default grace period, and not with a grace period shorter than the
// probe's K + T·I plus the shutdown budget; upstream and recipe have none.
func TestPromiseAt(t *testing.T) {
	cases := []struct {
		mode         Mode
		arm, lb, g   float64
		want, hasOne bool
	}{
		{ModeZerodrop, 1, 0, 30, true, true},
		{ModeZerodrop, 10, 0, 30, true, true},
		{ModeZerodrop, 10, 5, 30, true, true},
		{ModeZerodrop, 14, 0, 30, true, true},
		{ModeZerodrop, 15, 0, 30, false, true},
		{ModeZerodrop, 30, 0, 30, false, true},
		{ModeZerodrop, 1, 10, 30, false, true},
		{ModeZerodrop, 1, 9.9, 30, true, true},
		{ModeGates, 30, 5, 30, true, true},
		{ModeGates, 1, 0, 15, false, true},
		{ModeGates, 1, 0, 16, true, true},
		{ModeGates, 1, 0, 12, false, true}, // B = 4s (a third of G)
		{ModeGates, 1, 0, 3, false, true},  // B = 1s
		{ModeUpstream, 1, 0, 30, false, false},
		{ModeRecipe, 1, 0, 60, false, false},
	}
	for _, tc := range cases {
		p := PromiseAt(tc.mode, AzureClock{ARMLatencySeconds: tc.arm, LBPropagationSeconds: tc.lb, GraceSeconds: tc.g})
		if (p != nil) != tc.hasOne {
			t.Errorf("%s at arm %gs lb+%gs grace %gs: promise %+v, want one: %v", tc.mode, tc.arm, tc.lb, tc.g, p, tc.hasOne)
			continue
		}
		if p != nil && p.Holds != tc.want {
			t.Errorf("%s at arm %gs lb+%gs grace %gs: holds %v (%s), want %v", tc.mode, tc.arm, tc.lb, tc.g, p.Holds, p.Why, tc.want)
		}
	}
}
