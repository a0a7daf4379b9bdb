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
// What it does not do yet: it does not verify locally that the node serves an
// address (its caller decides what to announce); it has no BFD, so a node that
// fails hard is noticed by the router's hold timer; it announces IPv4 only;
// and it dials out only (no listener, no eBGP multihop).
package bgp
