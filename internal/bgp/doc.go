// Package bgp is a data-plane node's BGP speaker: it announces the Service
// addresses this node serves to the node's routers (one /32 path per address,
// next hop the node's own address) and withdraws them, built on GoBGP as a
// library.
//
// What it guarantees:
//   - Announce and Withdraw are idempotent and touch one address's path only;
//     they never reset a session or another address's path, so one Service
//     created or deleted is invisible to every other Service's routes.
//   - Stop is a node leaving: every path is withdrawn and each session closes
//     with a Cease NOTIFICATION, so routers drop the node at once.
//   - StopForRestart is a graceful-restart hand-over (RFC 4724): sessions
//     close without a NOTIFICATION or a withdrawal, so a router in helper mode
//     keeps forwarding to this node on stale routes for the restart time. A
//     successor started with GracefulRestart.Restarting, and given the same
//     addresses before Start, re-announces them before its End-of-RIB, and
//     the router's next hops never change.
//   - The speaker only originates: it accepts no route from its peers, so it
//     never relays one router's routes to another.
//
// What it announces is the Announcer's decision (Decide): a Service address
// while a TCP connection to one of its ports, made on the node to the
// address itself, succeeds (the address must be on one of the node's
// interfaces, so the check never leaves the node: AddressLink puts each
// candidate's address on a dummy link of the speaker's own, leaving alone
// one the node already has on another interface), withdrawn after
// FallCount failed checks in a row, and nothing while the node is leaving
// (NodeWatcher: the Node's exclusion label, the autoscaler's taint, its
// deletion; its cordon with WithdrawOnCordon). The check needs neither the
// API server nor the router, and the NodeWatcher changes its answer only on
// what it sees, so an API outage never withdraws a serving node.
//
// Where it runs: a process of its own (`zerodrop speaker`, one per node),
// never inside the HAProxy data-plane pod. That DaemonSet surges (two pods
// per node during an update), and two speakers on one node would open two
// sessions from one address, of which the router keeps one (RFC 4271 §6.8).
// The speaker's own update is a graceful restart instead: the old process
// calls StopForRestart, the new one starts with GracefulRestart.Restarting
// and its first decision recorded before Start. A stop that no successor
// follows on the node calls Stop (DecideStop, from the speaker's own Pod
// read at the stop: a node shutdown, the DaemonSet deleted), so the routers
// do not keep the node for the restart time while its HAProxy stops too.
//
// What it does not do yet: it has no BFD, so a node that fails hard is
// noticed by the router's hold timer; it announces IPv4 only; and it dials
// out only (no listener, no eBGP multihop).
package bgp
