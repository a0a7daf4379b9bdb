package testutil

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"zerodrop.dev/zerodrop/internal/supervisor"
)

// RootState is what a lab may touch outside its own namespaces: the root
// namespace's namespaces list, links, routes, nftables ruleset and the
// sysctls a lab could be tempted to set, and the processes this process
// started or that name one of its namespaces. Teardown tests compare it
// before and after. prefix starts the names of the lab's namespaces
// (netlab.NamePrefix, followed by a run's process ID); namespaces of other
// live lab runs (another test package running at the same time) are left
// out of the list, so a test that makes a namespace of its own names it
// the same way (netlab.OwnName): named otherwise, it shows up in the
// list of a lab test of another package that runs beside it.
func RootState(prefix string) (map[string]string, error) {
	s := map[string]string{}
	for _, c := range [][]string{
		{"ip", "netns", "list"},
		{"ip", "-o", "link"},
		{"ip", "route"},
		{"ip", "-6", "route"},
		{"nft", "list", "ruleset"},
	} {
		out, err := supervisor.CombinedOutput(context.Background(), supervisor.Command{Name: c[0], Args: c[1:]})
		if err != nil {
			return nil, err
		}
		text := string(out)
		if c[1] == "netns" {
			text = withoutOtherRuns(text, prefix)
		}
		s[strings.Join(c, " ")] = text
	}
	for _, k := range []string{
		"net/ipv4/ip_forward", "net/ipv4/conf/all/forwarding", "net/ipv6/conf/all/forwarding",
		"net/ipv4/conf/all/route_localnet", "net/ipv4/ip_nonlocal_bind", "net/bridge/bridge-nf-call-iptables",
		"net/netfilter/nf_conntrack_max", "net/netfilter/nf_conntrack_tcp_timeout_established",
	} {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		s["sysctl "+k] = strings.TrimSpace(string(b))
	}
	s["processes"] = strings.Join(labProcesses(prefix), "\n")
	return s, nil
}

// peerNetnsGone is what `ip netns list` prints, in place of a line, for a
// namespace whose peer id it could not read: one being removed while it
// listed (another package's lab run ending beside this one: make test's CI
// run at 70d124f failed TestTeardownLeavesNothing on this line alone). It
// names no namespace, so it is not a namespace left behind.
const peerNetnsGone = "Error: Peer netns reference is invalid."

// withoutOtherRuns drops `ip netns list` lines of other processes' lab runs,
// and the error line of a namespace removed while the list was read.
func withoutOtherRuns(list, prefix string) string {
	mine := fmt.Sprintf("%s-%d-", prefix, os.Getpid())
	var keep []string
	for _, line := range strings.Split(list, "\n") {
		if strings.HasPrefix(line, prefix+"-") && !strings.HasPrefix(line, mine) || strings.TrimSpace(line) == peerNetnsGone {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}

// labProcesses lists this process's children (zombies too) and any process
// whose command line names one of this process's lab namespaces.
func labProcesses(prefix string) []string {
	mine := fmt.Sprintf("%s-%d-", prefix, os.Getpid())
	var out []string
	for _, p := range supervisor.Processes() {
		cmd := strings.Join(p.Args, " ")
		if p.PPID == os.Getpid() || strings.Contains(cmd, mine) {
			out = append(out, strconv.Itoa(p.PID)+" "+cmd)
		}
	}
	sort.Strings(out)
	return out
}
