package awsdp

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
)

// The data plane's model of an emulator snapshot: the listeners to
// forward, each with its targets and what the lagged target states make
// of them, and the health checks to run. Built from the snapshot alone
// (no namespace), so it is tested without root.

// model is one programming's input.
type model struct {
	listeners []listener // by load balancer name, then port
	probes    map[probeKey]probeSpec
	skipped   []string // what is stored but not programmed, and why
}

// listener is one TCP listener of an NLB with a frontend address.
type listener struct {
	LB, DNSName string
	Frontend    netip.Addr
	Port        uint16
	TargetGroup string
	// Targets are the group's registrations (the latest of each target),
	// in registration order.
	Targets []Target
}

// receiving are the listener's targets that get new connections, in order.
func (l listener) receiving() []netip.AddrPort {
	var out []netip.AddrPort
	for _, t := range l.Targets {
		if t.Receiving {
			out = append(out, t.Addr)
		}
	}
	return out
}

// probeKey is one health check as the emulator asks for it
// (ProbeRequest): where, how, which path. Target groups that check the
// same key share one prober.
type probeKey struct {
	Addr     netip.AddrPort
	Protocol string
	Path     string
}

// probeSpec is how a key is probed: the shortest interval and timeout of
// the groups that check it, scaled, and the first group's matcher.
type probeSpec struct {
	Interval, Timeout time.Duration
	Matcher           string
}

func keyOf(req awsapi.ProbeRequest) (probeKey, bool) {
	ip, err := netip.ParseAddr(req.IP)
	if err != nil || req.Port <= 0 || req.Port > 65535 {
		return probeKey{}, false
	}
	k := probeKey{Addr: netip.AddrPortFrom(ip, uint16(req.Port)), Protocol: req.Protocol}
	if req.Protocol != "TCP" {
		k.Path = req.Path
	}
	return k, true
}

// targetAddr is where a member's traffic goes: the instance's private
// address (the probe request's) and the target's port.
func targetAddr(tg awsapi.TargetGroupView, m awsapi.MemberView) (netip.AddrPort, error) {
	ipText := m.Probe.IP
	if tg.TargetType == "ip" {
		ipText = m.Target.ID
	}
	ip, err := netip.ParseAddr(ipText)
	if err != nil || !ip.Is4() {
		return netip.AddrPort{}, fmt.Errorf("target %s of %s: no IPv4 address (%q)", m.Target.ID, tg.Name, ipText)
	}
	if m.Target.Port <= 0 || m.Target.Port > 65535 {
		return netip.AddrPort{}, fmt.Errorf("target %s of %s: port %d", m.Target.ID, tg.Name, m.Target.Port)
	}
	return netip.AddrPortFrom(ip, uint16(m.Target.Port)), nil
}

// buildModel reads the snapshot: every TCP listener of an NLB that has a
// frontend forwards to its target group's targets; each registration's
// state is the one it had the propagation time before the snapshot, as
// the data plane lags the target states (Receiving's view). scale
// multiplies the health checks' interval and timeout.
func buildModel(s awsapi.Snapshot, frontends map[string]netip.Addr, scale float64) model {
	m := model{probes: map[probeKey]probeSpec{}}
	view := s.Time.Add(-s.Propagation)
	for _, tg := range s.TargetGroups {
		for _, mv := range tg.Members {
			k, ok := keyOf(mv.Probe)
			if !ok {
				continue
			}
			spec := probeSpec{Interval: scaled(tg.HealthCheck.Interval, scale), Timeout: scaled(tg.HealthCheck.Timeout, scale), Matcher: tg.HealthCheck.Matcher}
			if have, ok := m.probes[k]; ok {
				spec.Interval, spec.Timeout, spec.Matcher = min(have.Interval, spec.Interval), min(have.Timeout, spec.Timeout), have.Matcher
			}
			m.probes[k] = spec
		}
	}
	for _, lb := range s.LoadBalancers {
		fe, ok := frontends[lb.DNSName]
		if !ok {
			m.skipped = append(m.skipped, fmt.Sprintf("load balancer %s: no frontend address", lb.Name))
			continue
		}
		for _, l := range lb.Listeners {
			if l.Protocol != "TCP" {
				m.skipped = append(m.skipped, fmt.Sprintf("load balancer %s port %d: protocol %s (TCP only)", lb.Name, l.Port, l.Protocol))
				continue
			}
			tg, ok := s.TargetGroup(l.TargetGroupARN)
			if !ok || l.Port <= 0 || l.Port > 65535 {
				m.skipped = append(m.skipped, fmt.Sprintf("load balancer %s port %d: no target group %s", lb.Name, l.Port, l.TargetGroupARN))
				continue
			}
			out := listener{LB: lb.Name, DNSName: lb.DNSName, Frontend: fe, Port: uint16(l.Port), TargetGroup: tg.ARN}
			out.Targets, m.skipped = listenerTargets(s, tg, view, m.skipped)
			m.listeners = append(m.listeners, out)
		}
	}
	return m
}

// listenerTargets is the group's targets with their lagged state: a
// target receives when Receiving names it, and its connections are reset
// when it is unhealthy and does not receive (an unhealthy target that
// takes new connections is the group failing open).
func listenerTargets(s awsapi.Snapshot, tg awsapi.TargetGroupView, view time.Time, skipped []string) ([]Target, []string) {
	receiving := s.Receiving(tg)
	var out []Target
	for _, mv := range tg.Members {
		addr, err := targetAddr(tg, mv)
		if err != nil {
			skipped = append(skipped, err.Error())
			continue
		}
		st, ok := mv.Life.StatusAt(view)
		state := st.State
		if !ok {
			state = awsapi.StateUnused
		}
		t := Target{ID: mv.Target.ID, Addr: addr, State: state, Receiving: slices.Contains(receiving, mv.Target)}
		t.Reset = state == awsapi.StateUnhealthy && !t.Receiving
		// A target registered again while it drains: the latest
		// registration speaks for it.
		out = slices.DeleteFunc(out, func(o Target) bool { return o.ID == t.ID && o.Addr == t.Addr })
		out = append(out, t)
	}
	return out, skipped
}

func scaled(d time.Duration, scale float64) time.Duration {
	return max(time.Duration(float64(d)*scale), 10*time.Millisecond)
}

// assignFrontends gives each DNS name without an address the lowest free
// address of pool (not its first or last), keeping every address already
// given: an NLB deleted and another created never share an address while
// the first one's flows may live. Names the pool cannot serve are
// returned.
func assignFrontends(have map[string]netip.Addr, names []string, pool netip.Prefix) (full []string) {
	used := map[netip.Addr]bool{}
	for _, a := range have {
		used[a] = true
	}
	first := pool.Masked().Addr()
	last := lastAddr(pool)
	next := first.Next()
	for _, n := range names {
		if _, ok := have[n]; ok {
			continue
		}
		for next.IsValid() && next.Less(last) && used[next] {
			next = next.Next()
		}
		if !next.IsValid() || !next.Less(last) {
			full = append(full, n)
			continue
		}
		have[n], used[next] = next, true
	}
	return full
}

// lastAddr is the last address of p (its broadcast address).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := 32 - p.Bits()
	for i := 3; i >= 0 && host > 0; i-- {
		n := min(host, 8)
		b[i] |= byte(1<<n - 1)
		host -= n
	}
	return netip.AddrFrom4(b)
}
