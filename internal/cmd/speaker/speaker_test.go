package speaker

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/bgp"
)

var base = []string{"--node-name", "n1", "--asn", "64513", "--source-address", "192.0.2.10",
	"--peer", "192.0.2.1:64512", "--addresses", "203.0.113.1:80,203.0.113.1:443,203.0.113.2:80"}

func TestParse(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	t.Setenv("HOST_IP", "")
	t.Setenv("POD_NAME", "")
	t.Setenv("POD_NAMESPACE", "")
	pw := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append(slices.Clone(base), "--peer", "192.0.2.5:64600:1179", "--peer-password-file", pw)
	c, err := Parse(args, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	wantPeers := []bgp.Peer{{Address: a("192.0.2.1"), ASN: 64512, Password: "s3cret"},
		{Address: a("192.0.2.5"), ASN: 64600, Port: 1179, Password: "s3cret"}}
	if c.NodeName != "n1" || c.Speaker.ASN != 64513 || c.Speaker.SourceAddress != a("192.0.2.10") ||
		!slices.Equal(c.Speaker.Peers, wantPeers) || c.CheckInterval != time.Second || c.WithdrawOnCordon || c.PodName != "" {
		t.Errorf("parsed %+v", c)
	}
	if c.AddressLink != "zerodrop0" {
		t.Errorf("address link %q, want zerodrop0 by default", c.AddressLink)
	}
	if off, err := Parse(append(slices.Clone(base), "--address-link="), &bytes.Buffer{}); err != nil || off.AddressLink != "" {
		t.Errorf("--address-link= (off): %q, %v; want empty", off.AddressLink, err)
	}
	if gr := c.Speaker.GracefulRestart; !gr.Enabled || !gr.Restarting || gr.RestartTime != 120*time.Second {
		t.Errorf("graceful restart %+v, want on, restarting, 120s", gr)
	}
	wantCands := bgp.StaticCandidates{{Address: a("203.0.113.1"), Ports: []uint16{80, 443}}, {Address: a("203.0.113.2"), Ports: []uint16{80}}}
	if len(c.Candidates) != len(wantCands) {
		t.Fatalf("candidates %v, want %v", c.Candidates, wantCands)
	}
	for i := range wantCands {
		if c.Candidates[i].Address != wantCands[i].Address || !slices.Equal(c.Candidates[i].Ports, wantCands[i].Ports) {
			t.Errorf("candidate %d: %v, want %v", i, c.Candidates[i], wantCands[i])
		}
	}

	// The downward API's variables stand in for --node-name and
	// --source-address.
	t.Setenv("NODE_NAME", "n2")
	t.Setenv("HOST_IP", "192.0.2.20")
	t.Setenv("POD_NAME", "speaker-x7k2p")
	t.Setenv("POD_NAMESPACE", "zerodrop-system")
	c, err = Parse([]string{"--asn", "64513", "--peer", "192.0.2.1:64512", "--graceful-restart-time", "0"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeName != "n2" || c.Speaker.SourceAddress != a("192.0.2.20") || c.Speaker.GracefulRestart.Enabled ||
		c.PodName != "speaker-x7k2p" || c.PodNamespace != "zerodrop-system" {
		t.Errorf("from the environment, graceful restart off: %+v", c)
	}
	// Without --addresses the candidates are the Services of the class.
	if len(c.Candidates) != 0 || c.Class != "zerodrop.dev/haproxy" || c.AdoptClassless {
		t.Errorf("without --addresses: candidates %v, class %q, adopt classless %v; want none, zerodrop.dev/haproxy, false", c.Candidates, c.Class, c.AdoptClassless)
	}
}

func TestParseErrors(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	t.Setenv("HOST_IP", "")
	t.Setenv("POD_NAME", "")
	t.Setenv("POD_NAMESPACE", "")
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	without := func(flag string) []string {
		var l []string
		for i := 0; i < len(base); i += 2 {
			if base[i] != flag {
				l = append(l, base[i], base[i+1])
			}
		}
		return l
	}
	with := func(extra ...string) []string { return append(slices.Clone(base), extra...) }
	for _, tc := range []struct {
		desc string
		args []string
		want string
	}{
		{"no node name", without("--node-name"), "--node-name"},
		{"no ASN", without("--asn"), "--asn"},
		{"no source address", without("--source-address"), "--source-address"},
		{"IPv6 source address", with("--source-address", "2001:db8::1"), "not an IPv4"},
		{"bad router ID", with("--router-id", "router1"), "--router-id"},
		{"no peer", without("--peer"), "--peer is required"},
		{"peer without ASN", with("--peer", "192.0.2.7"), "ADDRESS:ASN"},
		{"peer with a bad ASN", with("--peer", "192.0.2.7:as1"), "ASN"},
		{"peer with a bad port", with("--peer", "192.0.2.7:64512:99999"), "port"},
		{"peer listed twice", with("--peer", "192.0.2.1:64512"), "twice"},
		{"missing password file", with("--peer-password-file", "/nonexistent/pw"), "--peer-password-file"},
		{"empty password file", with("--peer-password-file", empty), "empty"},
		{"hold time 0", with("--hold-time", "0"), "--hold-time"},
		{"hold time under 3s", with("--hold-time", "1s"), "hold time"},
		{"restart time over 4095s", with("--graceful-restart-time", "2h"), "restart time"},
		{"address without a port", with("--addresses", "203.0.113.1"), "--addresses"},
		{"IPv6 address", with("--addresses", "[2001:db8::1]:80"), "IPv4:PORT"},
		{"check interval too short", with("--check-interval", "1ms"), "--check-interval"},
		{"pod name without its namespace", with("--pod-name", "speaker-x7k2p"), "--pod-namespace"},
		{"stray argument", with("extra"), "unexpected"},
		{"unknown flag", with("--bfd"), "unknown flag"},
	} {
		_, err := Parse(tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.desc, err, tc.want)
		}
	}
}

// TestRunUsage: a bad flag exits 2 and says why; -h exits 0 and prints the
// design (why a process of its own, what SIGTERM does, and when it
// withdraws instead).
func TestRunUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), []string{"--asn", "x"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "--asn") {
		t.Errorf("bad flag: exit %d, %q", code, errOut.String())
	}
	errOut.Reset()
	if code := Run(context.Background(), []string{"-h"}, &out, &errOut); code != 0 {
		t.Errorf("-h: exit %d", code)
	}
	for _, s := range []string{"surges", "RFC 4271", "SIGTERM", "--pod-name", "node shutdown", "--withdraw-on-cordon"} {
		if !strings.Contains(errOut.String(), s) {
			t.Errorf("-h does not mention %q:\n%s", s, errOut.String())
		}
	}
}
