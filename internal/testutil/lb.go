package testutil

import (
	"github.com/google/go-cmp/cmp"

	"zerodrop.dev/zerodrop/internal/model"
)

// LBDiff is cmp.Diff (-want +got) of two load balancers' canonical forms,
// versions left out (they are tokens, not content). Round-trip tests compare
// with it rather than with model.Diff, so that a field Diff overlooks (a probe,
// a weight) cannot hide itself by being overlooked on both sides.
func LBDiff(want, got *model.LoadBalancer) string {
	return cmp.Diff(canonical(want), canonical(got))
}

func canonical(lb *model.LoadBalancer) *model.LoadBalancer {
	c := model.Canonical(lb)
	if c != nil {
		c.Version = ""
	}
	return c
}
