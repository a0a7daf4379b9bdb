package awsapi

import (
	"maps"
	"slices"
	"sort"
	"strconv"
	"time"
)

// A read-only copy of the ELBv2 state for the lab's data plane: what it
// forwards by (load balancers, their listeners, the target groups they
// forward to and each registration's health timeline), taken at one
// instant of the emulator's clock. Nothing in it points into the
// emulator, so it is read without the lock.

// Snapshot is the emulator's load balancers and target groups at Time,
// every target group advanced to it.
type Snapshot struct {
	Time time.Time
	// Propagation is the emulator's (Options.Propagation): Receiving
	// looks at the states as they were this long before Time.
	Propagation   time.Duration
	LoadBalancers []LoadBalancerView // by name
	TargetGroups  []TargetGroupView  // by ARN
}

// LoadBalancerView is one load balancer and its listeners.
type LoadBalancerView struct {
	ARN, Name, DNSName, Scheme string
	Listeners                  []ListenerView // by port
}

// ListenerView is one listener: its port, protocol and the target group
// its forward action names.
type ListenerView struct {
	ARN            string
	Port           int32
	Protocol       string
	TargetGroupARN string
}

// TargetGroupView is one target group: its health check, attributes and
// registrations.
type TargetGroupView struct {
	ARN, Name, Protocol, TargetType string
	Port                            int32
	HealthCheck                     HealthCheckView
	Attributes                      map[string]string
	// InUse: a listener forwards to it.
	InUse bool
	// Members are the group's registrations in registration order,
	// draining ones included, until their draining ended more than the
	// propagation time ago.
	Members []MemberView
}

// HealthCheckView is a target group's health check.
type HealthCheckView struct {
	Protocol string // TCP, HTTP or HTTPS
	// Port is "traffic-port" or a port number.
	Port, Path, Matcher                  string
	Interval, Timeout                    time.Duration
	HealthyThreshold, UnhealthyThreshold int
}

// MemberView is one registration: the target, a copy of its Life, and the
// health check the emulator asks its Probe hook to answer for it.
type MemberView struct {
	Member
	Probe ProbeRequest
}

// Snapshot advances every target group to the emulator's clock (asking
// Options.Probe for the checks due) and copies the ELBv2 state.
func (e *Emulator) Snapshot() Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.opts.Now()
	s := Snapshot{Time: now, Propagation: e.opts.Propagation}
	byLB := map[string][]ListenerView{}
	for _, la := range sortedKeys(e.listeners) {
		l := e.listeners[la]
		byLB[l.lbARN] = append(byLB[l.lbARN], ListenerView{ARN: l.arn, Port: l.port, Protocol: l.protocol, TargetGroupARN: l.tgARN})
	}
	for _, a := range sortedKeys(e.lbs) {
		lb := e.lbs[a]
		ls := byLB[a]
		sort.SliceStable(ls, func(i, j int) bool { return ls[i].Port < ls[j].Port })
		s.LoadBalancers = append(s.LoadBalancers, LoadBalancerView{ARN: lb.arn, Name: lb.name, DNSName: lb.dnsName, Scheme: lb.scheme, Listeners: ls})
	}
	sort.Slice(s.LoadBalancers, func(i, j int) bool { return s.LoadBalancers[i].Name < s.LoadBalancers[j].Name })
	for _, a := range sortedKeys(e.tgs) {
		tg := e.tgs[a]
		e.advance(tg, now)
		v := TargetGroupView{ARN: tg.arn, Name: tg.name, Protocol: tg.protocol, TargetType: tg.targetType, Port: tg.port,
			HealthCheck: tg.hc.view(), Attributes: maps.Clone(tg.attrs), InUse: len(e.tgLoadBalancers(tg.arn)) > 0}
		for _, m := range tg.members {
			v.Members = append(v.Members, MemberView{Member: Member{Target: m.target, Life: m.life.clone()}, Probe: e.probeRequest(tg, m.target)})
		}
		s.TargetGroups = append(s.TargetGroups, v)
	}
	return s
}

// TargetGroup is the group with that ARN in the snapshot.
func (s Snapshot) TargetGroup(arn string) (TargetGroupView, bool) {
	i, ok := slices.BinarySearchFunc(s.TargetGroups, arn, func(v TargetGroupView, a string) int {
		switch {
		case v.ARN < a:
			return -1
		case v.ARN > a:
			return 1
		}
		return 0
	})
	if !ok {
		return TargetGroupView{}, false
	}
	return s.TargetGroups[i], true
}

// Receiving is the group's targets that receive new connections at the
// snapshot's time, as the emulator's Receiving answers: none for a group
// no listener forwards to.
func (s Snapshot) Receiving(tg TargetGroupView) []Target {
	if !tg.InUse {
		return nil
	}
	members := make([]Member, len(tg.Members))
	for i, m := range tg.Members {
		members[i] = m.Member
	}
	return Receiving(members, s.Time, s.Propagation)
}

func (h healthCheck) view() HealthCheckView {
	spec := h.spec()
	return HealthCheckView{Protocol: h.protocol, Port: h.port, Path: h.path, Matcher: h.matcher,
		Interval: spec.Interval, Timeout: time.Duration(h.timeout) * time.Second,
		HealthyThreshold: spec.HealthyThreshold, UnhealthyThreshold: spec.UnhealthyThreshold}
}

// PortNumber is the check's port for a target whose traffic port is
// trafficPort.
func (h HealthCheckView) PortNumber(trafficPort int32) int32 {
	if n, err := strconv.ParseInt(h.Port, 10, 32); err == nil {
		return int32(n)
	}
	return trafficPort
}

// clone is a copy that shares nothing with l: advancing either leaves the
// other as it was.
func (l *Life) clone() *Life {
	c := *l
	c.history = slices.Clone(l.history)
	return &c
}
