package awsdp

import "zerodrop.dev/zerodrop/internal/lab/netlab"

// What the data plane changes in its namespace besides its nftables
// table: frontend addresses on lo, and six sysctls. Each change is undone
// by Close; nothing outside the namespace is touched.

// sysctls the data plane sets, and why; the idle timeout's is added by
// New.
var sysctls = []netlab.Sysctl{
	// Connections are DNATed and forwarded by the IP stack.
	{Key: "net/ipv4/ip_forward", Value: "1"},
	// A DNATed packet leaves by the interface it came in on; an ICMP
	// redirect would tell the target to answer the client directly,
	// around the reverse translation. Off in "all" and the interface.
	{Key: "net/ipv4/conf/all/send_redirects", Value: "0"},
	{Key: "net/ipv4/conf/" + device + "/send_redirects", Value: "0"},
	// An NLB does not track TCP windows; conntrack's window checks would
	// mark a late segment invalid and drop it.
	{Key: "net/netfilter/nf_conntrack_tcp_be_liberal", Value: "1"},
	// A SYN the target never answers (kube-proxy drops it for a Local
	// Service with no ready pod on the node) leaves a SYN_SENT entry,
	// which conntrack keeps 120 s by default, each retransmission
	// renewing it. The lab's one client opens hundreds of connections a
	// second and reuses a source port within that time: its new
	// connection matched the old entry, went to the old target again
	// and renewed it, so a node out of service kept failing requests
	// long after the data plane stopped choosing it. Many clients do not
	// reuse one 4-tuple that fast; a few seconds past the client's
	// dial timeout (2 s) keeps a retransmitted SYN on its target.
	{Key: "net/netfilter/nf_conntrack_tcp_timeout_syn_sent", Value: "5"},
}

// idleSysctl is conntrack's timeout of an established TCP connection in
// the namespace: the NLB's idle timeout.
const idleSysctl = "net/netfilter/nf_conntrack_tcp_timeout_established"
