package bgp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	api "github.com/osrg/gobgp/v4/api"
)

// Config is one node's speaker.
type Config struct {
	// ASN is the node's own AS number.
	ASN uint32
	// RouterID identifies the speaker in its sessions; it defaults to
	// SourceAddress (it must be IPv4).
	RouterID netip.Addr
	// SourceAddress is the node's address: the sessions' source and every
	// path's next hop, so routers forward the announced addresses to it.
	SourceAddress netip.Addr
	// Peers are the routers to announce to.
	Peers []Peer
	// HoldTime is the BGP hold time offered to every peer (keepalives at a
	// third of it); 0 means 90 s, RFC 4271's suggestion.
	HoldTime time.Duration
	// ConnectRetry is the wait between failed connection attempts; 0 means
	// 5 s. (GoBGP's own default, 120 s, would leave a node unannounced for
	// two minutes when its router came up a moment after it.)
	ConnectRetry time.Duration
	// GracefulRestart is offered to every peer (RFC 4724).
	GracefulRestart GracefulRestart
	// Logger receives the speaker's structured logs and GoBGP's own;
	// nil discards them.
	Logger *slog.Logger
}

// Peer is one router.
type Peer struct {
	Address netip.Addr
	ASN     uint32
	// Password enables TCP MD5 signatures (RFC 2385) on the session.
	Password string
	// Port is the router's BGP port; 0 means 179.
	Port uint16
}

// GracefulRestart is the speaker's graceful-restart capability.
type GracefulRestart struct {
	// Enabled advertises the capability, for IPv4 unicast, with the
	// forwarding state preserved across a restart.
	Enabled bool
	// RestartTime is how long a router keeps this speaker's routes after
	// its session closed without a NOTIFICATION (StopForRestart); 0 means
	// 120 s, FRR's default. At most 4095 s (a 12-bit field).
	RestartTime time.Duration
	// Restarting sets the Restart State bit, and the Forwarding State bit
	// for IPv4 unicast, in the OPEN: this speaker takes over from one
	// stopped with StopForRestart (gobgpd's -r). Without it a router drops
	// the stale paths as soon as the session is back, before the new
	// UPDATEs. The speaker holds its announcements until each router's
	// End-of-RIB (at most a quarter of the restart time, at most 5 s) and
	// then sends them all before its own End-of-RIB, which is when the
	// router drops the stale paths that were not re-announced. Harmless on
	// a first start: the router has nothing stale to keep.
	Restarting bool
}

const (
	defaultHoldTime     = 90 * time.Second
	defaultConnectRetry = 5 * time.Second
	defaultRestartTime  = 120 * time.Second
	maxRestartTime      = 4095 * time.Second
)

// withDefaults returns the configuration with its zero values filled in, or
// an error naming the first invalid field.
func (c Config) withDefaults() (Config, error) {
	if c.ASN == 0 {
		return c, errors.New("bgp config: ASN is required")
	}
	if !c.SourceAddress.Is4() {
		return c, fmt.Errorf("bgp config: source address %q is not IPv4", c.SourceAddress)
	}
	if !c.RouterID.IsValid() {
		c.RouterID = c.SourceAddress
	}
	if !c.RouterID.Is4() {
		return c, fmt.Errorf("bgp config: router ID %q is not IPv4", c.RouterID)
	}
	if len(c.Peers) == 0 {
		return c, errors.New("bgp config: no peers")
	}
	seen := map[netip.Addr]bool{}
	for _, p := range c.Peers {
		if !p.Address.Is4() {
			return c, fmt.Errorf("bgp config: peer address %q is not IPv4", p.Address)
		}
		if seen[p.Address] {
			return c, fmt.Errorf("bgp config: peer %s listed twice", p.Address)
		}
		seen[p.Address] = true
		if p.ASN == 0 {
			return c, fmt.Errorf("bgp config: peer %s has no ASN", p.Address)
		}
	}
	if c.HoldTime == 0 {
		c.HoldTime = defaultHoldTime
	}
	// RFC 4271 §4.2: zero (no keepalives) or at least three seconds.
	if c.HoldTime < 3*time.Second || c.HoldTime > 65535*time.Second {
		return c, fmt.Errorf("bgp config: hold time %s is outside 3s..65535s", c.HoldTime)
	}
	if c.ConnectRetry == 0 {
		c.ConnectRetry = defaultConnectRetry
	}
	if c.ConnectRetry < time.Second {
		return c, fmt.Errorf("bgp config: connect retry %s is under 1s", c.ConnectRetry)
	}
	if c.GracefulRestart.RestartTime == 0 {
		c.GracefulRestart.RestartTime = defaultRestartTime
	}
	if c.GracefulRestart.RestartTime < time.Second || c.GracefulRestart.RestartTime > maxRestartTime {
		return c, fmt.Errorf("bgp config: restart time %s is outside 1s..4095s", c.GracefulRestart.RestartTime)
	}
	return c, nil
}

func seconds(d time.Duration) uint64 { return uint64((d + time.Second - 1) / time.Second) }

// ipv4Unicast is the one address family the speaker announces.
var ipv4Unicast = &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}

// apiPeer is p as GoBGP's peer configuration.
func (c Config) apiPeer(p Peer) *api.Peer {
	gr := c.GracefulRestart
	afi := &api.AfiSafi{Config: &api.AfiSafiConfig{Family: ipv4Unicast, Enabled: true}}
	peer := &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: p.Address.String(),
			PeerAsn:         p.ASN,
			LocalAsn:        c.ASN,
			AuthPassword:    p.Password,
		},
		Transport: &api.Transport{
			LocalAddress: c.SourceAddress.String(),
			RemotePort:   uint32(p.Port),
		},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime:          seconds(c.HoldTime),
			KeepaliveInterval: max(seconds(c.HoldTime)/3, 1),
			ConnectRetry:      seconds(c.ConnectRetry),
		}},
		AfiSafis: []*api.AfiSafi{afi},
	}
	if gr.Enabled {
		rt := uint32(seconds(gr.RestartTime))
		peer.GracefulRestart = &api.GracefulRestart{
			Enabled:     true,
			RestartTime: rt,
			// How long a restarting speaker waits for a router's
			// End-of-RIB before announcing anyway. It needs nothing from
			// its routers (GoBGP waits only because RFC 4724 has a
			// speaker select routes first), so a router slow to send one
			// should not eat the restart time: a quarter of it, at most 5 s.
			DeferralTime:    uint32(min(max(rt/4, 1), 5)),
			LocalRestarting: gr.Restarting,
		}
		afi.MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
	}
	return peer
}
