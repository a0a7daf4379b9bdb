// Package speaker is the `zerodrop speaker` command: one data-plane node's
// BGP speaker (internal/bgp), run as a process of its own, one per node (a
// DaemonSet that does not surge).
//
// Why not inside the HAProxy data-plane pod: that DaemonSet surges (two pods
// on a node during an update), and two speakers on one node would open two
// sessions from one address, which the router resolves by closing one (RFC
// 4271 §6.8). The speaker's own update is a graceful restart instead: on
// SIGTERM the old process stops without a NOTIFICATION (the router keeps its
// routes, stale, for --graceful-restart-time) and the new one starts as a
// restarting speaker and re-announces before its End-of-RIB. A stop with
// no successor on the node (a node shutdown, the chart uninstalled) is a
// withdrawal instead, which the speaker tells from its own Pod at SIGTERM
// (bgp.DecideStop).
//
// What it announces is verified on the node, not through the API server: it
// puts each candidate address on a link of its own (--address-link,
// zerodrop0), and an address is announced while it is on one of the node's
// interfaces and a TCP connection to one of its ports succeeds, so an API outage never withdraws a
// serving node and a node whose HAProxy stops serving is withdrawn. The API
// server only says whether the node is leaving (its Node's labels, taints
// and deletion), and its outage keeps the last answer.
package speaker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"zerodrop.dev/zerodrop/internal/bgp"
)

// Config is the command's flags, parsed and checked.
type Config struct {
	NodeName string
	Speaker  bgp.Config
	// Candidates are --addresses; none: the Services of Class (and
	// classless ones with AdoptClassless), from the API server.
	Candidates       bgp.StaticCandidates
	Class            string
	AdoptClassless   bool
	CheckInterval    time.Duration
	WithdrawOnCordon bool
	// AddressLink is the link the speaker puts the candidates' addresses
	// on (bgp.AddressLink); empty: the node's configuration does.
	AddressLink string
	// PodName and PodNamespace name the speaker's own Pod, read at a stop
	// to choose between a graceful restart and a withdrawal
	// (bgp.DecideStop); empty: always a graceful restart.
	PodName, PodNamespace string
}

const (
	// syncWait bounds the wait for the first read of the Node before the
	// first announcement: a leaving node restarting its speaker should not
	// announce, but an API outage must not keep a serving node silent.
	syncWait = 5 * time.Second
	// stopTimeout bounds StopForRestart and Stop.
	stopTimeout = 10 * time.Second
	// decideTimeout bounds the reads that choose between them: with
	// stopTimeout, within the chart's 15 s termination grace period.
	decideTimeout = 3 * time.Second
)

const about = `usage: zerodrop speaker [flags]: announce this node's Service addresses over BGP while its HAProxy serves them

One process per data-plane node, beside the HAProxy data plane and not inside its pods: that
DaemonSet surges (two pods per node during an update), and two speakers on one node would open
two sessions from one address (RFC 4271 6.8). Each candidate address is put on the speaker's own
link (--address-link; an address already on another interface, such as lo, is left there), and
is announced while it is on one of the node's interfaces and a TCP connection to one of its ports,
made on the node, succeeds; it is
withdrawn after 3 failed checks in a row, and every address is withdrawn while the node is leaving
(its Node has the node.kubernetes.io/exclude-from-external-load-balancers label or the
ToBeDeletedByClusterAutoscaler taint, or is being deleted; cordoned, with --withdraw-on-cordon).
The API server is only asked about the node leaving; while it cannot be reached, the last answer
stands. SIGTERM stops for a graceful restart when a successor takes over on the node: no
NOTIFICATION, the router keeps the routes (stale) for --graceful-restart-time while the next
speaker takes over, so an update or restart of the speaker keeps the routes. With --pod-name, the
speaker reads its Pod at SIGTERM and withdraws every address instead (a Cease: the routers drop
the node at once) when none will: the node is leaving; its kubelet stops it without the Pod being
deleted (a node shutdown, an eviction); or the Pod is deleted while its DaemonSet is gone, being
deleted, or no longer selects the node by its node selector. What cannot be read keeps the
graceful restart.

`

// Parse parses and checks args.
func Parse(args []string, out io.Writer) (Config, error) {
	var (
		c                       Config
		asn                     uint32
		routerID, source, addrs string
		peers                   []string
		passwordFile            string
		holdTime, restartTime   time.Duration
		checkInterval           time.Duration
		withdrawOnCordon        bool
	)
	fs := pflag.NewFlagSet("zerodrop speaker", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.SortFlags = false
	fs.StringVar(&c.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's Node name, whose labels, taints and deletion say it is leaving (default: $NODE_NAME)")
	fs.Uint32Var(&asn, "asn", 0, "this node's AS number (required)")
	fs.StringVar(&routerID, "router-id", "", "BGP router ID, IPv4 (default: --source-address)")
	fs.StringVar(&source, "source-address", os.Getenv("HOST_IP"), "this node's IPv4 address: the sessions' source and the routes' next hop (default: $HOST_IP)")
	fs.StringArrayVar(&peers, "peer", nil, "a router, ADDRESS:ASN[:PORT] (repeat for each; at least one)")
	fs.StringVar(&passwordFile, "peer-password-file", "", "file holding the TCP MD5 password (RFC 2385) of every session; empty: none")
	fs.DurationVar(&holdTime, "hold-time", 90*time.Second, "BGP hold time offered to the routers (3s..65535s); a node that fails hard is noticed after it")
	fs.DurationVar(&restartTime, "graceful-restart-time", 120*time.Second, "how long a router keeps this node's routes after the speaker stops for a restart (1s..4095s); 0 disables graceful restart")
	fs.StringVar(&addrs, "addresses", "", "the Service addresses this node may announce, IPv4:PORT,... (an address with several ports is checked on each until one answers); empty: the ingress addresses and TCP ports of the LoadBalancer Services of --load-balancer-class, from the API server (an outage keeps the last list)")
	fs.StringVar(&c.Class, "load-balancer-class", "zerodrop.dev/haproxy", "without --addresses: the spec.loadBalancerClass whose Services' addresses are candidates (the controller's --load-balancer-class)")
	fs.BoolVar(&c.AdoptClassless, "adopt-classless", false, "without --addresses: Services without a loadBalancerClass are candidates too (the controller's --adopt-classless)")
	fs.DurationVar(&checkInterval, "check-interval", time.Second, "time between two local checks of every address (each check is bounded by half of it)")
	fs.StringVar(&c.AddressLink, "address-link", bgp.DefaultAddressLink, "the link (a dummy link, created when missing; needs CAP_NET_ADMIN) the speaker puts each candidate address on as a /32, removing it once no Service has it and never at a stop; an address already on another interface (lo) is left there; empty: put the addresses on the nodes yourself")
	fs.StringVar(&c.PodName, "pod-name", os.Getenv("POD_NAME"), "this speaker's own Pod, read at SIGTERM: a graceful restart only when a successor takes over on this node, a withdrawal otherwise (see above); empty: always a graceful restart (default: $POD_NAME)")
	fs.StringVar(&c.PodNamespace, "pod-namespace", os.Getenv("POD_NAMESPACE"), "the namespace of --pod-name (default: $POD_NAMESPACE)")
	fs.BoolVar(&withdrawOnCordon, "withdraw-on-cordon", false, "a cordoned node withdraws too: kubectl drain cordons first but leaves the speaker and HAProxy running, so without it a drain followed by a reboot keeps the node's routes stale for the graceful-restart time; off by default because a cordon alone does not stop HAProxy from serving")
	fs.Usage = func() {
		fmt.Fprint(out, about)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if c.NodeName == "" {
		return c, errors.New("--node-name (or $NODE_NAME) is required")
	}
	if c.PodName != "" && c.PodNamespace == "" {
		return c, errors.New("--pod-name needs --pod-namespace (or $POD_NAMESPACE)")
	}
	if asn == 0 {
		return c, errors.New("--asn is required")
	}
	sc := bgp.Config{ASN: asn, HoldTime: holdTime}
	var err error
	if sc.SourceAddress, err = ipv4("--source-address", source); err != nil {
		return c, err
	}
	if routerID != "" {
		if sc.RouterID, err = ipv4("--router-id", routerID); err != nil {
			return c, err
		}
	}
	if len(peers) == 0 {
		return c, errors.New("--peer is required (ADDRESS:ASN[:PORT])")
	}
	password := ""
	if passwordFile != "" {
		b, err := os.ReadFile(passwordFile)
		if err != nil {
			return c, fmt.Errorf("--peer-password-file: %w", err)
		}
		password = strings.TrimRight(string(b), "\r\n")
		if password == "" {
			return c, fmt.Errorf("--peer-password-file: %s is empty", passwordFile)
		}
	}
	for _, s := range peers {
		p, err := parsePeer(s)
		if err != nil {
			return c, fmt.Errorf("--peer %q: %w", s, err)
		}
		p.Password = password
		sc.Peers = append(sc.Peers, p)
	}
	switch {
	case restartTime < 0:
		return c, fmt.Errorf("--graceful-restart-time %s is negative", restartTime)
	case restartTime > 0:
		// Restarting on every start: a process cannot tell a first start
		// from one after its predecessor stopped (or was killed), and it is
		// harmless on a first start.
		sc.GracefulRestart = bgp.GracefulRestart{Enabled: true, RestartTime: restartTime, Restarting: true}
	}
	if holdTime == 0 {
		return c, errors.New("--hold-time must be at least 3s")
	}
	if c.Candidates, err = parseAddresses(addrs); err != nil {
		return c, fmt.Errorf("--addresses: %w", err)
	}
	if checkInterval < 10*time.Millisecond {
		return c, fmt.Errorf("--check-interval %s is under 10ms", checkInterval)
	}
	c.CheckInterval, c.WithdrawOnCordon, c.Speaker = checkInterval, withdrawOnCordon, sc
	// The speaker's own checks (hold time and restart time ranges, peers
	// listed twice) with the flag names' context.
	if _, err := bgp.New(sc); err != nil {
		return c, err
	}
	return c, nil
}

func ipv4(flag, s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, fmt.Errorf("%s is required", flag)
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("%s %q is not an IPv4 address", flag, s)
	}
	return a, nil
}

// parsePeer parses ADDRESS:ASN[:PORT].
func parsePeer(s string) (bgp.Peer, error) {
	f := strings.Split(s, ":")
	if len(f) < 2 || len(f) > 3 {
		return bgp.Peer{}, errors.New("want ADDRESS:ASN[:PORT] (IPv4)")
	}
	a, err := netip.ParseAddr(f[0])
	if err != nil || !a.Is4() {
		return bgp.Peer{}, fmt.Errorf("%q is not an IPv4 address", f[0])
	}
	asn, err := strconv.ParseUint(f[1], 10, 32)
	if err != nil || asn == 0 {
		return bgp.Peer{}, fmt.Errorf("ASN %q is not a number in 1..4294967295", f[1])
	}
	p := bgp.Peer{Address: a, ASN: uint32(asn)}
	if len(f) == 3 {
		port, err := strconv.ParseUint(f[2], 10, 16)
		if err != nil || port == 0 {
			return bgp.Peer{}, fmt.Errorf("port %q is not in 1..65535", f[2])
		}
		p.Port = uint16(port)
	}
	return p, nil
}

// parseAddresses parses IPv4:PORT,...; an address listed with several
// ports is one candidate.
func parseAddresses(s string) (bgp.StaticCandidates, error) {
	var cands bgp.StaticCandidates
	index := map[netip.Addr]int{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		ap, err := netip.ParseAddrPort(f)
		if err != nil || !ap.Addr().Is4() || ap.Port() == 0 {
			return nil, fmt.Errorf("%q is not IPv4:PORT", f)
		}
		i, ok := index[ap.Addr()]
		if !ok {
			i = len(cands)
			index[ap.Addr()] = i
			cands = append(cands, bgp.Candidate{Address: ap.Addr()})
		}
		cands[i].Ports = append(cands[i].Ports, ap.Port())
	}
	return cands, nil
}

// Run parses args and runs the speaker until ctx ends (SIGTERM), then stops
// it for a graceful restart or, when no successor will take over on the
// node, withdrawing (bgp.DecideStop). Exit 2 on a usage error, 1 on a
// failure.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := Parse(args, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop speaker: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	if err := run(ctx, c, log); err != nil {
		log.Error("speaker", "err", err)
		return 1
	}
	return 0
}

func run(ctx context.Context, c Config, log *slog.Logger) error {
	// In the pod: the service account; elsewhere $KUBECONFIG.
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return fmt.Errorf("API server configuration: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	w, err := bgp.NewNodeWatcher(bgp.NodeWatcherConfig{Client: cs, NodeName: c.NodeName, WithdrawOnCordon: c.WithdrawOnCordon, Logger: log})
	if err != nil {
		return err
	}
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	go func() { _ = w.Run(watchCtx) }()
	select {
	case <-w.Synced():
	case <-time.After(syncWait):
		log.Warn("the Node is not read yet; announcing as not leaving", "waited", syncWait)
	case <-ctx.Done():
		return nil
	}
	c.Speaker.Logger = log
	sp, err := bgp.New(c.Speaker)
	if err != nil {
		return err
	}
	var cands bgp.CandidateSource = c.Candidates
	if len(c.Candidates) == 0 {
		svcs, factory := bgp.NewServiceCandidates(cs, c.Class, c.AdoptClassless)
		factory.Start(watchCtx.Done())
		// The first round must know the Services: a restarting speaker's
		// End-of-RIB with nothing announced would make the router drop
		// the routes it keeps for the restart. Without the API server the
		// session is not opened, and the router's restart timer decides.
		for !cache.WaitForCacheSync(waitCtx(ctx, syncWait), svcs.Synced) {
			if ctx.Err() != nil {
				return nil
			}
			log.Warn("the Services are not listed yet; not opening the sessions", "class", c.Class)
		}
		cands = svcs
	}
	var placer bgp.Placer
	if c.AddressLink != "" {
		placer = &bgp.AddressLink{Name: c.AddressLink, Logger: log}
	}
	an, err := bgp.NewAnnouncer(bgp.AnnouncerConfig{
		Speaker: sp, Candidates: cands, Leaving: w.Leaving, Placer: placer,
		Interval: c.CheckInterval, Logger: log,
	})
	if err != nil {
		return err
	}
	// One round before Start: a restarting speaker's first UPDATEs, before
	// its End-of-RIB, must carry what the node serves.
	if err := an.Step(ctx); err != nil {
		log.Error("first round", "err", err)
	}
	if err := sp.Start(ctx); err != nil {
		return err
	}
	an.Run(ctx)
	decideCtx, cancelDecide := context.WithTimeout(context.Background(), decideTimeout)
	withdraw, why := bgp.DecideStop(bgp.ReadStopFacts(decideCtx, cs, c.PodNamespace, c.PodName, c.NodeName, w.Leaving()))
	cancelDecide()
	stopCtx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if withdraw {
		log.Info("stopping: withdrawing every address", "reason", why)
		if err := sp.Stop(stopCtx); err != nil {
			return fmt.Errorf("stop and withdraw: %w", err)
		}
		return nil
	}
	log.Info("stopping for a graceful restart", "reason", why)
	if err := sp.StopForRestart(stopCtx); err != nil {
		return fmt.Errorf("stop for a graceful restart: %w", err)
	}
	return nil
}

// waitCtx is a channel closed when ctx ends or d has passed.
func waitCtx(ctx context.Context, d time.Duration) <-chan struct{} {
	c, cancel := context.WithTimeout(ctx, d)
	context.AfterFunc(c, cancel)
	return c.Done()
}
