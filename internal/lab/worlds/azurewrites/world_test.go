package azurewrites

import "testing"

// TestWriteBounds: the writes a load balancer's diff calls for, from its
// pools' differences.
func TestWriteBounds(t *testing.T) {
	const up, down = "None", "Down"
	type pool struct {
		have map[string]string
		want []string
	}
	for _, tc := range []struct {
		name   string
		pools  []pool
		lo, hi int
	}{
		{"holds what it should", []pool{{map[string]string{"a": up, "b": up}, []string{"a", "b"}}}, 0, 0},
		{"one to add", []pool{{map[string]string{"a": up}, []string{"a", "b"}}}, 1, 1},
		{"one to drain and remove", []pool{{map[string]string{"a": up, "b": up}, []string{"a"}}}, 2, 2},
		{"already draining: removal only", []pool{{map[string]string{"a": up, "b": down}, []string{"a"}}}, 1, 1},
		{"replaced: add and drain, then remove", []pool{{map[string]string{"a": up, "b": up}, []string{"a", "c"}}}, 2, 2},
		{"two leaving: removed together or apart", []pool{{map[string]string{"a": up, "b": down, "c": up}, []string{"a", "d"}}}, 2, 3},
		{"wanted one back in service", []pool{{map[string]string{"a": down}, []string{"a"}}}, 1, 1},
		{"two pools replaced: one plan, then removals", []pool{
			{map[string]string{"a": up, "b": up}, []string{"a", "c"}},
			{map[string]string{"x": up, "y": up}, []string{"x", "z"}},
		}, 2, 3},
		{"one pool right, one to add", []pool{
			{map[string]string{"a": up}, []string{"a"}},
			{map[string]string{"x": up}, []string{"x", "z"}},
		}, 1, 1},
		{"empty to empty", []pool{{map[string]string{}, nil}}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, leaving := false, 0
			for _, p := range tc.pools {
				f, l := poolDiff(p.have, p.want)
				first, leaving = first || f, leaving+l
			}
			if lo, hi := lbWriteBounds(first, leaving); lo != tc.lo || hi != tc.hi {
				t.Errorf("[%d, %d], want [%d, %d]", lo, hi, tc.lo, tc.hi)
			}
		})
	}
}

// TestIsKlogError: churn's error log lines are klog's of severity E only.
func TestIsKlogError(t *testing.T) {
	for line, want := range map[string]bool{
		`E1127 05:17:53.073714    4354 controller.go:302] "Unhandled Error" err=<`: true,
		`I1127 05:17:53.073714    4354 controller.go:302] "Ensured load balancer"`: false,
		`W1127 05:17:53.073714    4354 azure.go:1] "slow"`:                         false,
		`Error: something`:        false,
		`E112 7`:                  false,
		`	get PLS: GET https://x`: false,
	} {
		if got := isKlogError(line); got != want {
			t.Errorf("isKlogError(%q) = %v, want %v", line, got, want)
		}
	}
}
