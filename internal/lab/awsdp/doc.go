// Package awsdp is an AWS Network Load Balancer's data plane for the lab:
// it programs a network namespace (the lab's load-balancer host) from the
// load balancers, listeners and target groups an awsapi emulator stores,
// and forwards as an NLB with instance targets does. It is not a proxy:
// each new TCP connection to a listener is DNATed to one target (the
// instance's private address and the target's port: node IP and node
// port for cloud-provider-aws), the client's address kept (an instance
// target group's preserve_client_ip default), and conntrack keeps it
// there. The targets must route their answers to clients back through
// the namespace, as the Azure world's nodes already do for DNAT.
//
// What it models, and from where:
//
//   - Frontends. An NLB is known by its DNS name; the data plane gives
//     each NLB an address from Config.Frontends, in the order it first
//     sees them, and answers it on the namespace's device. Frontend maps
//     the DNS name the CCM writes into a Service's status to it.
//   - New connections go only to the targets the emulator's Receiving
//     gives (awsapi/targethealth.go): the healthy ones as their states
//     were the emulator's propagation time ago, every unhealthy one when
//     none is healthy (fail open), never an initial or draining one.
//   - Established connections stay on their target (conntrack) while it
//     drains and after, until the connection has been idle for
//     Config.IdleTimeout (the NLB's TCP idle timeout, 350 s); a packet
//     of a connection the data plane no longer knows is answered with a
//     TCP reset, as an NLB answers data after the idle timeout.
//   - When a target is unhealthy (in the same lagged view) and the
//     group does not fail open, its established connections are reset at
//     their next packet, either direction:
//     target_health_state.unhealthy.connection_termination.enabled is
//     true by default. (That a group failing open resets nothing is an
//     assumption: AWS documents fail-open for new connections only.)
//     The data plane then forgets those connections, as an NLB forgets
//     a flow it reset: a SYN of the same 4-tuple later is a new flow
//     (conntrack.go).
//     Deregistration never resets
//     (deregistration_delay.connection_termination.enabled is false by
//     default and cloud-provider-aws never sets it).
//   - Health checks are real: the emulator asks its Options.Probe hook
//     for the result of each scheduled check, and Probes answers it with
//     what the data plane measured from the namespace: an HTTP GET of the
//     check's path on its port (a status in the group's matcher, 200-399
//     by default) or a TCP connect, five times per interval of the group
//     (times Config.ProbeScale), each within its timeout; the emulator's
//     check at a time gets the last result sent by then.
//
// The data plane reads the emulator (awsapi.Emulator.Snapshot) every
// Config.Poll: target health moves with the emulator's clock, not only
// with its writes. The model (model.go) is built from a snapshot alone
// and rendered as one nft transaction (nft.go) applied when it changed.
//
// Not modelled: UDP, TLS and TCP_UDP listeners (skipped, logged), IP
// targets (the emulator registers instances only), cross-zone routing
// (every target takes traffic), per-listener idle timeouts, and the
// reset of an idle connection of an unhealthy target before its next
// packet.
//
// Wiring, for a world:
//
//	probes := awsdp.NewProbes(nil)
//	emu := awsapi.New(awsapi.Options{Probe: probes.Check, …})
//	dp, err := awsdp.New(ctx, awsdp.Config{NS: lbNetns, Emulator: emu,
//		Probes: probes, Frontends: pool, Logf: …})
//	…
//	addr, ok := dp.Frontend(service.Status.LoadBalancer.Ingress[0].Hostname)
//	…
//	dp.Close()
//
// Close removes everything the data plane made in the namespace.
package awsdp
