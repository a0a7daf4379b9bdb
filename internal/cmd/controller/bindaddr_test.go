package controller

import (
	"net"
	"strings"
	"testing"
)

// TestBindAddressFlags: every bind-address flag is checked at start, and an
// IPv6 address without brackets (what `$(HOST_IP):9092` becomes on an
// IPv6-primary node) is a usage error naming the flag and the bracket form,
// not a listener failing with Go's "too many colons" in a crash loop.
func TestBindAddressFlags(t *testing.T) {
	dp := []string{"--role=data-plane", "--pod-name=dp-x", "--pod-namespace=zerodrop", "--pod-uid=0b5c"}
	cases := []struct {
		desc string
		args []string
		want []string // substrings of the error; none: valid
	}{
		{"IPv4 with brackets", append(dp, "--state-bind-address=[192.0.2.10]:9092"), nil},
		{"IPv6 with brackets", append(dp, "--state-bind-address=[fd00::a]:9092"), nil},
		{"every interface", append(dp, "--state-bind-address=:9092"), nil},
		{"a name", []string{"--metrics-bind-address=localhost:8080"}, nil},
		{"disabled", []string{"--metrics-bind-address=0", "--health-probe-bind-address=0", "--drain-bind-address=0"}, nil},
		{"IPv6 without brackets", append(dp, "--state-bind-address=fd00::a:9092"),
			[]string{"--state-bind-address", `"fd00::a:9092"`, "[fd00::a]:9092"}},
		{"IPv6 metrics without brackets", []string{"--metrics-bind-address=fd00::a:9094"}, []string{"--metrics-bind-address", "[fd00::a]:9094"}},
		{"IPv6 probes without brackets", []string{"--health-probe-bind-address=fd00::a:9093"}, []string{"--health-probe-bind-address", "[fd00::a]:9093"}},
		{"IPv6 drain without brackets", []string{"--drain-bind-address=2001:db8::1:9090"}, []string{"--drain-bind-address", "[2001:db8::1]:9090"}},
		{"an empty host variable", append(dp, "--state-bind-address=[]:9092"), []string{"--state-bind-address", "[]"}},
		{"no port", []string{"--metrics-bind-address=192.0.2.10"}, []string{"--metrics-bind-address", "missing port"}},
		{"port out of range", []string{"--health-probe-bind-address=:70000"}, []string{"--health-probe-bind-address", "70000"}},
		{"port not a number", []string{"--drain-bind-address=:drain"}, []string{"--drain-bind-address", `"drain"`}},
		{"an unexpanded variable", append(dp, "--state-bind-address=[$(HOST_IP)]:9092"), []string{"--state-bind-address", "$(HOST_IP)"}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := parse(t, tc.args)
			err := cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("valid flags refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want an error with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestBracketedIPv4Listens: the chart writes `[$(HOST_IP)]:PORT` for both
// families, so Go must accept brackets around an IPv4 literal: SplitHostPort
// strips them and Listen binds that address (only it).
func TestBracketedIPv4Listens(t *testing.T) {
	host, port, err := net.SplitHostPort("[127.0.0.1]:9092")
	if err != nil || host != "127.0.0.1" || port != "9092" {
		t.Fatalf("SplitHostPort([127.0.0.1]:9092) = %q, %q, %v", host, port, err)
	}
	ln, err := net.Listen("tcp", "[127.0.0.1]:0")
	if err != nil {
		t.Fatalf("Listen([127.0.0.1]:0): %v", err)
	}
	defer ln.Close()
	if a := ln.Addr().(*net.TCPAddr); !a.IP.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("Listen([127.0.0.1]:0) bound %s, want 127.0.0.1", a)
	}
}
