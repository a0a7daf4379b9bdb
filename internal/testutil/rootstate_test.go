package testutil

import (
	"fmt"
	"os"
	"testing"
)

func TestWithoutOtherRuns(t *testing.T) {
	mine := fmt.Sprintf("zdlab-%d-node1 (id: 3)", os.Getpid())
	own := func(format string) string { return fmt.Sprintf(format, os.Getpid()) }
	for _, tc := range []struct{ name, in, want string }{
		{"own namespaces stay", mine + "\nvpn (id: 1)\n", mine + "\nvpn (id: 1)\n"},
		{"another run's go", "zdlab-1-node1 (id: 4)\n" + mine + "\n", mine + "\n"},
		{"a namespace removed while listing is no namespace", peerNetnsGone + "\n" + mine + "\n", mine + "\n"},
		{"a namespace not of a lab stays", "zd-unbal-test-7\n", "zd-unbal-test-7\n"},
		{"another test's router namespace goes", "zdbgp-1-router (id: 0)\n" + mine + "\n", mine + "\n"},
		{"own router namespace stays", own("zdbgp-%d-router (id: 0)\n"), own("zdbgp-%d-router (id: 0)\n")},
		{"another test's link goes", "4: eth0: <UP> mtu 1400\n12: zdbgp26491@if2: <UP> mtu 1500 link-netns zdbgp-26491-router\n",
			"4: eth0: <UP> mtu 1400\n"},
		{"own link stays", own("12: zdbgp%d@if2: <UP> mtu 1500\n"), own("12: zdbgp%d@if2: <UP> mtu 1500\n")},
		{"another test's routes go", "default via 192.0.2.1 dev eth0\n198.51.100.108/30 dev zdbgp26491 proto kernel\n",
			"default via 192.0.2.1 dev eth0\n"},
		{"a link not of a test stays", "5: zdx: <UP>\n6: veth7@if3: <UP>\n", "5: zdx: <UP>\n6: veth7@if3: <UP>\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := withoutOtherRuns(tc.in); got != tc.want {
				t.Errorf("withoutOtherRuns(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
