package awsdp

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// spec is the tests' health check: every 10 s, thresholds 2.
var spec = awsapi.CheckSpec{Interval: 10 * time.Second, HealthyThreshold: 2, UnhealthyThreshold: 2}

// life is a registration at t0 (no registration delay) whose checks pass
// until failFrom (zero: always), deregistered at dereg (zero: never, with
// a 300 s delay), advanced to now.
func life(now, failFrom, dereg time.Time) *awsapi.Life {
	l := awsapi.NewLife(t0, 0)
	check := func(at time.Time) awsapi.CheckResult {
		return awsapi.CheckResult{OK: failFrom.IsZero() || at.Before(failFrom)}
	}
	if !dereg.IsZero() {
		l.Advance(dereg, spec, check)
		l.Deregister(dereg, 300*time.Second)
	}
	l.Advance(now, spec, check)
	return l
}

func member(id, ip string, l *awsapi.Life) awsapi.MemberView {
	return awsapi.MemberView{Member: awsapi.Member{Target: awsapi.Target{ID: id, Port: 30080}, Life: l},
		Probe: awsapi.ProbeRequest{TargetGroupARN: "tg", Target: awsapi.Target{ID: id, Port: 30080}, IP: ip, Port: 32000, Protocol: "HTTP", Path: "/healthz"}}
}

func snapshot(now time.Time, members ...awsapi.MemberView) awsapi.Snapshot {
	return awsapi.Snapshot{Time: now, Propagation: 35 * time.Second,
		LoadBalancers: []awsapi.LoadBalancerView{{Name: "a1", DNSName: "a1.elb", Listeners: []awsapi.ListenerView{
			{Port: 80, Protocol: "TCP", TargetGroupARN: "tg"}, {Port: 53, Protocol: "UDP", TargetGroupARN: "tg"}}},
			{Name: "a2", DNSName: "a2.elb"}},
		TargetGroups: []awsapi.TargetGroupView{{ARN: "tg", Name: "web", Protocol: "TCP", TargetType: "instance", Port: 30080, InUse: true,
			HealthCheck: awsapi.HealthCheckView{Protocol: "HTTP", Port: "32000", Path: "/healthz", Matcher: "200-399",
				Interval: 10 * time.Second, Timeout: 6 * time.Second, HealthyThreshold: 2, UnhealthyThreshold: 2},
			Members: members}}}
}

// TestBuildModel: which targets receive and which are reset, from the
// states as they were the propagation time ago.
func TestBuildModel(t *testing.T) {
	var zero time.Time
	late := t0.Add(10 * time.Minute)
	cases := []struct {
		desc          string
		s             awsapi.Snapshot
		receiving     []string
		reset         []string
		states        string
		wantListeners int
	}{
		{"both healthy", snapshot(late, member("i-a", "10.0.0.1", life(late, zero, zero)), member("i-b", "10.0.0.2", life(late, zero, zero))),
			[]string{"i-a", "i-b"}, nil, "healthy healthy", 1},
		{"unhealthy one is reset", snapshot(late, member("i-a", "10.0.0.1", life(late, zero, zero)), member("i-b", "10.0.0.2", life(late, t0.Add(time.Minute), zero))),
			[]string{"i-a"}, []string{"i-b"}, "healthy unhealthy", 1},
		{"unhealthy less than the propagation time ago: not yet", snapshot(t0.Add(time.Minute+20*time.Second),
			member("i-a", "10.0.0.1", life(t0.Add(time.Minute+20*time.Second), zero, zero)),
			member("i-b", "10.0.0.2", life(t0.Add(time.Minute+20*time.Second), t0.Add(time.Minute), zero))),
			[]string{"i-a", "i-b"}, nil, "healthy healthy", 1},
		{"every target unhealthy: fail open, no reset", snapshot(late, member("i-a", "10.0.0.1", life(late, t0.Add(time.Minute), zero)), member("i-b", "10.0.0.2", life(late, t0.Add(time.Minute), zero))),
			[]string{"i-a", "i-b"}, nil, "unhealthy unhealthy", 1},
		{"deregistered within the propagation time: still receiving", snapshot(late, member("i-a", "10.0.0.1", life(late, zero, zero)), member("i-b", "10.0.0.2", life(late, zero, late.Add(-10*time.Second)))),
			[]string{"i-a", "i-b"}, nil, "healthy healthy", 1},
		{"draining: no new connections, no reset", snapshot(late, member("i-a", "10.0.0.1", life(late, zero, zero)), member("i-b", "10.0.0.2", life(late, zero, late.Add(-time.Minute)))),
			[]string{"i-a"}, nil, "healthy draining", 1},
		{"draining while unhealthy: not reset", snapshot(late, member("i-a", "10.0.0.1", life(late, zero, zero)), member("i-b", "10.0.0.2", life(late, t0.Add(time.Minute), late.Add(-time.Minute)))),
			[]string{"i-a"}, nil, "healthy draining", 1},
		{"no address: skipped", snapshot(late, member("i-a", "", life(late, zero, zero))), nil, nil, "", 1},
	}
	fes := map[string]netip.Addr{"a1.elb": netip.MustParseAddr("198.18.200.1")}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			m := buildModel(c.s, fes, 1)
			if len(m.listeners) != c.wantListeners {
				t.Fatalf("listeners %+v, want %d (skipped %v)", m.listeners, c.wantListeners, m.skipped)
			}
			l := m.listeners[0]
			if l.Frontend != fes["a1.elb"] || l.Port != 80 {
				t.Errorf("listener %+v, want a1's frontend on 80", l)
			}
			var recv, reset, states []string
			for _, tg := range l.Targets {
				if tg.Receiving {
					recv = append(recv, tg.ID)
				}
				if tg.Reset {
					reset = append(reset, tg.ID)
				}
				states = append(states, string(tg.State))
				if tg.Addr.Port() != 30080 {
					t.Errorf("target %+v: want port 30080", tg)
				}
			}
			if !slices.Equal(recv, c.receiving) || !slices.Equal(reset, c.reset) || strings.Join(states, " ") != c.states {
				t.Errorf("receiving %v reset %v states %v; want %v, %v, %v", recv, reset, states, c.receiving, c.reset, c.states)
			}
			if !slices.ContainsFunc(m.skipped, func(s string) bool { return strings.Contains(s, "UDP") }) ||
				!slices.ContainsFunc(m.skipped, func(s string) bool { return strings.Contains(s, "a2: no frontend") }) {
				t.Errorf("skipped %v: want the UDP listener and a2 (no frontend)", m.skipped)
			}
		})
	}
}

func TestProbeSpecs(t *testing.T) {
	s := snapshot(t0, member("i-a", "10.0.0.1", life(t0, time.Time{}, time.Time{})))
	m := buildModel(s, nil, 0.1)
	k := probeKey{Addr: netip.MustParseAddrPort("10.0.0.1:32000"), Protocol: "HTTP", Path: "/healthz"}
	if got := m.probes[k]; got != (probeSpec{Interval: time.Second, Timeout: 600 * time.Millisecond, Matcher: "200-399"}) || len(m.probes) != 1 {
		t.Errorf("probes %v, want one HTTP check of 10.0.0.1:32000/healthz every 1 s (10 s scaled by 0.1)", m.probes)
	}
}

// TestRender: a listener with receiving targets is DNATed to them, a
// target to reset has its rule, a listener without a receiving target
// takes no SYN.
func TestRender(t *testing.T) {
	fe := netip.MustParseAddr("198.18.200.1")
	ls := []listener{
		{LB: "a1", Frontend: fe, Port: 80, Targets: []Target{
			{ID: "i-a", Addr: netip.MustParseAddrPort("10.0.0.1:30080"), Receiving: true},
			{ID: "i-b", Addr: netip.MustParseAddrPort("10.0.0.2:30080"), Reset: true},
			{ID: "i-c", Addr: netip.MustParseAddrPort("10.0.0.3:30080"), Receiving: true}}},
		{LB: "a1", Frontend: fe, Port: 81, Targets: []Target{{ID: "i-d", Addr: netip.MustParseAddrPort("10.0.0.4:30081")}}},
	}
	script, made := render(ls, 7, []string{"l_0", "l_5"})
	for _, want := range []string{
		"add rule ip awsdp l_0 dnat ip to jhash ip saddr . tcp sport . ip daddr . tcp dport mod 2 seed 0x7 map { 0 : 10.0.0.1 . 30080, 1 : 10.0.0.3 . 30080 }",
		"ct original ip daddr 198.18.200.1 ct original proto-dst 80 ct reply ip saddr 10.0.0.2 ct reply proto-src 30080 reject with tcp reset",
		"add element ip awsdp serving { 198.18.200.1 . 80 }",
		"add rule ip awsdp nat_pre ip protocol tcp ip daddr . tcp dport vmap { 198.18.200.1 . 80 : goto l_0 }",
		"delete chain ip awsdp l_5",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %q:\n%s", want, script)
		}
	}
	if strings.Contains(script, "delete chain ip awsdp l_0") || !slices.Equal(made, []string{"l_0"}) {
		t.Errorf("chains made %v, script:\n%s\nwant l_0 kept, l_5 deleted, none for port 81", made, script)
	}
	// The reset rules come before established connections are accepted.
	if strings.Index(script, "reject with tcp reset") > strings.Index(script, "ct state established,related accept") {
		t.Errorf("reset after the established accept:\n%s", script)
	}
}

func TestAssignFrontends(t *testing.T) {
	pool := netip.MustParsePrefix("198.18.200.0/30") // .1 and .2 usable
	have := map[string]netip.Addr{}
	if full := assignFrontends(have, []string{"a", "b"}, pool); len(full) != 0 || have["a"].String() != "198.18.200.1" || have["b"].String() != "198.18.200.2" {
		t.Fatalf("assigned %v, full %v; want a .1, b .2", have, full)
	}
	// a is gone from the emulator: its address stays taken.
	if full := assignFrontends(have, []string{"b", "c"}, pool); !slices.Equal(full, []string{"c"}) || have["b"].String() != "198.18.200.2" {
		t.Errorf("assigned %v, full %v; want c refused, b kept", have, full)
	}
}

func TestMatches(t *testing.T) {
	for _, c := range []struct {
		matcher string
		code    int
		want    bool
	}{{"200-399", 200, true}, {"200-399", 399, true}, {"200-399", 503, false}, {"", 302, true}, {"200,202", 202, true}, {"200,202", 201, false}} {
		if got := matches(c.matcher, c.code); got != c.want {
			t.Errorf("matches(%q, %d) = %t, want %t", c.matcher, c.code, got, c.want)
		}
	}
}

// TestProbesCheck: the emulator's check at a time is answered by the
// last probe sent by then; before any, a failure.
func TestProbesCheck(t *testing.T) {
	p := NewProbes(nil)
	req := awsapi.ProbeRequest{IP: "10.0.0.1", Port: 32000, Protocol: "HTTP", Path: "/healthz"}
	k, _ := keyOf(req)
	p.record(k, t0.Add(10*time.Second), awsapi.CheckResult{OK: true, HTTPCode: 200})
	p.record(k, t0.Add(20*time.Second), awsapi.CheckResult{HTTPCode: 503})
	for _, c := range []struct {
		at   time.Duration
		want awsapi.CheckResult
	}{{5 * time.Second, awsapi.CheckResult{}}, {10 * time.Second, awsapi.CheckResult{OK: true, HTTPCode: 200}},
		{19 * time.Second, awsapi.CheckResult{OK: true, HTTPCode: 200}}, {25 * time.Second, awsapi.CheckResult{HTTPCode: 503}}} {
		if got := p.Check(req, t0.Add(c.at)); got != c.want {
			t.Errorf("check at +%v: %+v, want %+v", c.at, got, c.want)
		}
	}
	other := req
	other.Path = "/other"
	if got := p.Check(other, t0.Add(time.Minute)); got.OK {
		t.Errorf("a check never probed: %+v, want a failure", got)
	}
}
