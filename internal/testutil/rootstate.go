package testutil

import (
	"context"
	"fmt"
	"os"
	"regexp"
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
// (netlab.NamePrefix, followed by a run's process ID). What another test
// process makes (another package running at the same time) is left out of
// the namespaces, links and routes, when its name says whose it is (see
// otherRunName): a test that makes a namespace or a root-namespace link of
// its own names it so (netlab.OwnName; internal/bgp's router and link);
// named otherwise, it shows up in the lists of a lab test of another
// package that runs beside it.
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
		if c[0] == "ip" {
			text = withoutOtherRuns(text)
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

// otherRunName matches the names tests give what they make outside their
// own namespaces: zd<package>-<pid>-<suffix> for a namespace
// (netlab.OwnName's zdlab-<pid>-…, internal/bgp's zdbgp-<pid>-router) and
// zd<package><pid> for a link, whose name has 15 characters at most
// (internal/bgp's zdbgp<pid>, in the root namespace, with its routes). The
// make test CI run at 3d73ae1 failed TestLabBGPSpeakerRestart on
// internal/bgp's router namespace, link and routes: its test, in the race
// line, removed them while the lab ran.
var otherRunName = regexp.MustCompile(`\bzd[a-z]+-?([0-9]+)`)

// withoutOtherRuns drops the lines of `ip` listings (namespaces, links,
// routes) that name what another test process made, and the error line of
// a namespace removed while the list was read.
func withoutOtherRuns(list string) string {
	var keep []string
	for _, line := range strings.Split(list, "\n") {
		if strings.TrimSpace(line) == peerNetnsGone || namesOtherRun(line) {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}

func namesOtherRun(line string) bool {
	for _, m := range otherRunName.FindAllStringSubmatch(line, -1) {
		if pid, err := strconv.Atoi(m[1]); err == nil && pid != os.Getpid() {
			return true
		}
	}
	return false
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
