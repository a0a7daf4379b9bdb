package bgp

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSpeakerBeforeStart: before Start the speaker only records its set,
// and Announce, Withdraw and Set change it the way plan says (nothing on the
// network: the FRR test covers what a router sees).
func TestSpeakerBeforeStart(t *testing.T) {
	p := netip.MustParsePrefix
	sp, err := New(Config{ASN: 64513, SourceAddress: netip.MustParseAddr("192.0.2.10"),
		Peers: []Peer{{Address: netip.MustParseAddr("192.0.2.1"), ASN: 64512}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		desc string
		do   func() error
		want []netip.Prefix
	}{
		{"announce", func() error { return sp.Announce(p("203.0.113.2/32")) }, []netip.Prefix{p("203.0.113.2/32")}},
		{"announce again", func() error { return sp.Announce(p("203.0.113.2/32")) }, []netip.Prefix{p("203.0.113.2/32")}},
		{"announce another", func() error { return sp.Announce(p("203.0.113.1/32")) },
			[]netip.Prefix{p("203.0.113.1/32"), p("203.0.113.2/32")}},
		{"withdraw one not announced", func() error { return sp.Withdraw(p("203.0.113.9/32")) },
			[]netip.Prefix{p("203.0.113.1/32"), p("203.0.113.2/32")}},
		{"withdraw one", func() error { return sp.Withdraw(p("203.0.113.2/32")) }, []netip.Prefix{p("203.0.113.1/32")}},
		{"set", func() error { return sp.Set([]netip.Prefix{p("203.0.113.3/32"), p("203.0.113.1/32")}) },
			[]netip.Prefix{p("203.0.113.1/32"), p("203.0.113.3/32")}},
		{"set nil withdraws all", func() error { return sp.Set(nil) }, []netip.Prefix{}},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.desc, err)
		}
		if got := sp.Announced(); !slices.Equal(got, step.want) {
			t.Fatalf("%s: announced %v, want %v", step.desc, got, step.want)
		}
	}
	if err := sp.Announce(p("2001:db8::1/128")); err == nil {
		t.Error("an IPv6 prefix was accepted; the speaker announces IPv4 only")
	}
}

func TestConfigDefaults(t *testing.T) {
	a := netip.MustParseAddr
	ok := Config{ASN: 64513, SourceAddress: a("192.0.2.10"), Peers: []Peer{{Address: a("192.0.2.1"), ASN: 64512}}}
	c, err := ok.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.RouterID != ok.SourceAddress || c.HoldTime != 90*time.Second || c.ConnectRetry != 5*time.Second ||
		c.GracefulRestart.RestartTime != 120*time.Second {
		t.Errorf("defaults: %+v", c)
	}
	for _, tc := range []struct {
		desc string
		edit func(*Config)
		want string
	}{
		{"no ASN", func(c *Config) { c.ASN = 0 }, "ASN"},
		{"IPv6 source", func(c *Config) { c.SourceAddress = a("2001:db8::1") }, "source address"},
		{"no peers", func(c *Config) { c.Peers = nil }, "no peers"},
		{"peer twice", func(c *Config) { c.Peers = append(c.Peers, c.Peers[0]) }, "twice"},
		{"peer without ASN", func(c *Config) { c.Peers = []Peer{{Address: a("192.0.2.1")}} }, "no ASN"},
		{"hold time under 3s", func(c *Config) { c.HoldTime = time.Second }, "hold time"},
		{"restart time over 4095s", func(c *Config) { c.GracefulRestart.RestartTime = 2 * time.Hour }, "restart time"},
	} {
		c := ok
		c.Peers = slices.Clone(ok.Peers)
		tc.edit(&c)
		if _, err := c.withDefaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.desc, err, tc.want)
		}
	}
}
