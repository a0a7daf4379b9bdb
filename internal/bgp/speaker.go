package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// ErrStopped is returned by a speaker's methods after Stop or StopForRestart.
var ErrStopped = errors.New("bgp speaker stopped")

// Speaker announces a node's addresses to its routers. Its methods are safe
// for concurrent use; one Speaker runs once (Start, then Stop or
// StopForRestart).
type Speaker struct {
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	srv       *server.BgpServer // nil until Start
	stopped   bool
	announced map[netip.Prefix]struct{}
	stopWatch context.CancelFunc // ends the peer-state watch
	// quiet silences GoBGP's error about stopping a stopped server, which
	// its Stop logs after our StopBgp (see stop).
	quiet *quietHandler
}

// New returns a speaker for cfg; it does nothing on the network until Start.
func New(cfg Config) (*Speaker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("logger", "bgp", "asn", cfg.ASN, "source", cfg.SourceAddress)
	return &Speaker{cfg: cfg, log: log, announced: map[netip.Prefix]struct{}{}}, nil
}

// Start runs the speaker and opens a session to each peer; it returns once
// the peers are configured, not when their sessions are up (GoBGP keeps
// connecting in the background). Addresses announced before Start are in
// the first UPDATEs, before the End-of-RIB, which a graceful-restart
// successor needs so that routers keep every path.
func (s *Speaker) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	if s.srv != nil {
		return errors.New("bgp speaker: already started")
	}
	s.quiet = newQuietHandler(s.log.With("component", "gobgp").Handler())
	srv := server.NewBgpServer(server.LoggerOption(slog.New(s.quiet), nil))
	go srv.Serve()
	watchCtx, stopWatch := context.WithCancel(context.Background())
	started := false
	defer func() {
		if !started {
			s.quiet.silence()
			srv.Stop()
			stopWatch()
		}
	}()
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn:      s.cfg.ASN,
		RouterId: s.cfg.RouterID.String(),
		// No listener: the speaker dials its routers. Port 179 stays free
		// for a successor (or another speaker) on the node, and a router
		// that dials the node is refused rather than answered twice.
		ListenPort: -1,
	}}); err != nil {
		return fmt.Errorf("start bgp: %w", err)
	}
	if err := originateOnly(ctx, srv); err != nil {
		return err
	}
	if err := srv.WatchEvent(watchCtx, server.WatchEventMessageCallbacks{
		OnPeerUpdate: s.logPeer,
	}, server.WatchPeer()); err != nil {
		return fmt.Errorf("watch peers: %w", err)
	}
	for _, p := range sortedPrefixes(s.announced) {
		if err := addPath(srv, p, s.cfg.SourceAddress); err != nil {
			return err
		}
	}
	for _, p := range s.cfg.Peers {
		if err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: s.cfg.apiPeer(p)}); err != nil {
			return fmt.Errorf("add peer %s: %w", p.Address, err)
		}
	}
	started = true
	s.srv, s.stopWatch = srv, stopWatch
	s.log.Info("speaker started", "peers", len(s.cfg.Peers), "announced", len(s.announced),
		"gracefulRestart", s.cfg.GracefulRestart.Enabled, "restarting", s.cfg.GracefulRestart.Restarting)
	return nil
}

// originateOnly makes the global RIB take the speaker's own paths and
// nothing its peers send: it never relays one router's routes to another,
// nor keeps a table it has no use for. (A plain default-reject import policy
// would reject the speaker's own paths too: GoBGP applies the global import
// policy to local paths.)
func originateOnly(ctx context.Context, srv *server.BgpServer) error {
	const name = "zerodrop-originate-only"
	if err := srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{
		Name: name,
		Statements: []*api.Statement{{
			Name:       name + "-local",
			Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
			Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT},
		}},
	}}); err != nil {
		return fmt.Errorf("add import policy: %w", err)
	}
	if err := srv.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Direction:     api.PolicyDirection_POLICY_DIRECTION_IMPORT,
		Policies:      []*api.Policy{{Name: name}},
		DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT,
	}}); err != nil {
		return fmt.Errorf("assign import policy: %w", err)
	}
	return nil
}

func (s *Speaker) logPeer(e *apiutil.WatchEventMessage_PeerEvent, _ time.Time) {
	if e.Type != apiutil.PEER_EVENT_STATE {
		return
	}
	st := e.Peer.State
	attrs := []any{"peer", st.NeighborAddress, "state", st.SessionState.String()}
	if st.DisconnectMessage != "" {
		attrs = append(attrs, "reason", st.DisconnectMessage)
	}
	s.log.Info("peer state", attrs...)
}

// Announce adds prefix's path (next hop the node's address). Announcing an
// announced prefix does nothing: it is one path, and no UPDATE is sent.
func (s *Speaker) Announce(prefix netip.Prefix) error {
	return s.update([]netip.Prefix{prefix}, func(announced []netip.Prefix) []netip.Prefix {
		return append(announced, prefix)
	})
}

// Withdraw removes prefix's path; withdrawing a prefix that is not
// announced does nothing.
func (s *Speaker) Withdraw(prefix netip.Prefix) error {
	return s.update([]netip.Prefix{prefix}, func(announced []netip.Prefix) []netip.Prefix {
		return slices.DeleteFunc(announced, func(p netip.Prefix) bool { return p == prefix.Masked() })
	})
}

// Set makes the announced set exactly desired (nil or empty withdraws
// everything), touching only the prefixes that differ.
func (s *Speaker) Set(desired []netip.Prefix) error {
	return s.update(desired, func([]netip.Prefix) []netip.Prefix { return desired })
}

// update announces and withdraws what plan says turns the announced set
// into desired(announced). Before Start it only records the set. Every
// change goes through plan, so none touches a prefix that stays.
func (s *Speaker) update(args []netip.Prefix, desired func(announced []netip.Prefix) []netip.Prefix) error {
	for _, p := range args {
		if !p.IsValid() || !p.Addr().Is4() {
			return fmt.Errorf("bgp speaker: %q is not an IPv4 prefix", p)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	add, del := plan(desired(sortedPrefixes(s.announced)), s.announced)
	for _, p := range del {
		if s.srv != nil {
			if err := deletePath(s.srv, p, s.cfg.SourceAddress); err != nil {
				return err
			}
		}
		delete(s.announced, p)
		s.log.Info("withdrawn", "prefix", p)
	}
	for _, p := range add {
		if s.srv != nil {
			if err := addPath(s.srv, p, s.cfg.SourceAddress); err != nil {
				return err
			}
		}
		s.announced[p] = struct{}{}
		s.log.Info("announced", "prefix", p)
	}
	return nil
}

// Announced returns the announced prefixes, sorted.
func (s *Speaker) Announced() []netip.Prefix {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedPrefixes(s.announced)
}

// Stop is the node leaving: it withdraws every path and closes each session
// with a Cease NOTIFICATION, after which routers drop all of this node's
// routes at once (no graceful restart follows a NOTIFICATION unless RFC
// 8538's N bit was negotiated, which the speaker never offers).
func (s *Speaker) Stop(ctx context.Context) error {
	return s.stop(ctx, false)
}

// StopForRestart is a graceful-restart hand-over: it closes each session
// without a NOTIFICATION or a withdrawal, as a crash would, so a router that
// negotiated graceful restart keeps this node's paths (stale) for the
// restart time while a successor (GracefulRestart.Restarting) takes over. A
// peer that did not negotiate graceful restart gets the Cease NOTIFICATION
// of Stop instead, since it would otherwise keep dead routes for a hold
// time.
func (s *Speaker) StopForRestart(ctx context.Context) error {
	return s.stop(ctx, true)
}

func (s *Speaker) stop(ctx context.Context, restart bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	s.stopped = true
	srv := s.srv
	if srv == nil {
		return nil
	}
	if !restart && len(s.announced) > 0 {
		if err := srv.DeletePath(apiutil.DeletePathRequest{DeleteAll: true}); err != nil {
			s.log.Error("withdraw all", "err", err)
		}
	}
	// GoBGP's BgpServer.StopBgp with AllowGracefulRestart deletes each
	// neighbor with sendNotification = false when that neighbor negotiated
	// graceful restart: its FSM then closes the connection without the
	// Cease it sends otherwise (deleteNeighbor, fsmHandler.established).
	// gobgpd's SIGTERM calls Stop, which asks for no graceful restart and
	// so always sends the Cease.
	err := srv.StopBgp(ctx, &api.StopBgpRequest{AllowGracefulRestart: restart})
	// Stop also ends the BFD server's goroutine; its own StopBgp then fails
	// (already stopped) and logs that, which the quiet handler drops.
	s.quiet.silence()
	srv.Stop()
	s.stopWatch()
	if err != nil {
		return fmt.Errorf("stop bgp (graceful restart %t): %w", restart, err)
	}
	s.log.Info("speaker stopped", "gracefulRestart", restart, "announced", len(s.announced))
	return nil
}

func sortedPrefixes(m map[netip.Prefix]struct{}) []netip.Prefix {
	l := make([]netip.Prefix, 0, len(m))
	for p := range m {
		l = append(l, p)
	}
	slices.SortFunc(l, netip.Prefix.Compare)
	return l
}

// path is prefix's IPv4 unicast path: origin IGP, next hop the node.
func path(prefix netip.Prefix, nextHop netip.Addr) (*apiutil.Path, error) {
	nlri, err := bgp.NewIPAddrPrefix(prefix)
	if err != nil {
		return nil, fmt.Errorf("prefix %s: %w", prefix, err)
	}
	nh, err := bgp.NewPathAttributeNextHop(nextHop)
	if err != nil {
		return nil, fmt.Errorf("next hop %s: %w", nextHop, err)
	}
	return &apiutil.Path{
		Family: bgp.RF_IPv4_UC,
		Nlri:   nlri,
		Attrs:  []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP), nh},
	}, nil
}

func addPath(srv *server.BgpServer, prefix netip.Prefix, nextHop netip.Addr) error {
	p, err := path(prefix, nextHop)
	if err != nil {
		return err
	}
	if _, err := srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{p}}); err != nil {
		return fmt.Errorf("announce %s: %w", prefix, err)
	}
	return nil
}

func deletePath(srv *server.BgpServer, prefix netip.Prefix, nextHop netip.Addr) error {
	p, err := path(prefix, nextHop)
	if err != nil {
		return err
	}
	if err := srv.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{p}}); err != nil {
		return fmt.Errorf("withdraw %s: %w", prefix, err)
	}
	return nil
}
