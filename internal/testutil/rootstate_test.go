package testutil

import (
	"fmt"
	"os"
	"testing"
)

func TestWithoutOtherRuns(t *testing.T) {
	mine := fmt.Sprintf("zdlab-%d-node1 (id: 3)", os.Getpid())
	for _, tc := range []struct{ name, in, want string }{
		{"own namespaces stay", mine + "\nvpn (id: 1)\n", mine + "\nvpn (id: 1)\n"},
		{"another run's go", "zdlab-1-node1 (id: 4)\n" + mine + "\n", mine + "\n"},
		{"a namespace removed while listing is no namespace", peerNetnsGone + "\n" + mine + "\n", mine + "\n"},
		{"a namespace not of a lab stays", "zd-unbal-test-7\n", "zd-unbal-test-7\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := withoutOtherRuns(tc.in, "zdlab"); got != tc.want {
				t.Errorf("withoutOtherRuns(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
