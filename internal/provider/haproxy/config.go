package haproxy

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
)

// metaBackend is the name of the backend that loads the listener metadata map.
// It never receives traffic; it exists so that HAProxy loads the map, which
// the runtime API then shows with `show map`.
const metaBackend = "zd-meta"

// Probe defaults HAProxy is given when the model leaves a field zero; the
// metadata keeps the model's own values so that Observe returns them as they
// were asked for.
const (
	defaultInterMillis = 2000
	defaultRise        = model.DefaultRise
	defaultFall        = model.DefaultFall
)

// maxWeight is the largest server weight HAProxy accepts.
const maxWeight = 256

// renderInput is everything the configuration is made of.
type renderInput struct {
	AdminSocket    string
	StateFile      string
	MapFile        string
	IdleTimeout    time.Duration
	HardStopAfter  time.Duration
	MaxOldWorkers  int
	NoStrictLimits bool
	Proxies        []proxySpec
}

// proxySpec is one listener of one load balancer, as it is to be rendered.
type proxySpec struct {
	Key      string
	Listener model.Listener
	// Name is the proxy's, proxyName(Key, Listener.Name) (empty: computed
	// by render).
	Name string
}

// proxySpecs flattens load balancers into the proxies that serve them,
// sorted by proxy name (each computed once: at 10,000 listeners a sort
// that named both sides of every comparison made hundreds of thousands).
func proxySpecs(lbs map[string]*model.LoadBalancer) []proxySpec {
	var out []proxySpec
	for key, lb := range lbs {
		if lb == nil {
			continue
		}
		for _, l := range lb.Listeners {
			out = append(out, proxySpec{Key: key, Listener: l, Name: proxyName(key, l.Name)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// render returns the HAProxy configuration and the metadata map. Both are
// functions of their input only (no I/O), so the same state always renders
// to the same bytes.
func render(in renderInput) (cfg, meta []byte, err error) {
	var b, m bytes.Buffer
	b.WriteString("# Rendered by zerodrop (internal/provider/haproxy). Do not edit: the provider\n")
	b.WriteString("# rewrites this file after every change and reloads HAProxy with it.\n")
	b.WriteString("global\n")
	fmt.Fprintf(&b, "    stats socket %s mode 600 level admin expose-fd listeners\n", in.AdminSocket)
	b.WriteString("    stats timeout 2m\n")
	fmt.Fprintf(&b, "    server-state-file %s\n", in.StateFile)
	if in.HardStopAfter > 0 {
		fmt.Fprintf(&b, "    hard-stop-after %dms\n", in.HardStopAfter.Milliseconds())
	}
	if in.MaxOldWorkers > 0 {
		fmt.Fprintf(&b, "    mworker-max-reloads %d\n", in.MaxOldWorkers)
	}
	if in.NoStrictLimits {
		b.WriteString("    no strict-limits\n")
	}
	b.WriteString("\ndefaults\n")
	b.WriteString("    mode tcp\n")
	// A backend that vanished undrained (a pod stopped when its drain call
	// failed, a node lost) drops SYNs until a health check marks it down:
	// each connection to it costs one connect timeout, then a retry on
	// another backend (redispatch) instead of a failed connection. 1 s is
	// Linux's initial SYN retransmission time: a backend on the cluster
	// network answers in well under it, and a client's own timeout is
	// usually longer than one retry.
	b.WriteString("    timeout connect 1s\n")
	b.WriteString("    retries 3\n")
	b.WriteString("    option redispatch 1\n")
	fmt.Fprintf(&b, "    timeout client %dms\n", in.IdleTimeout.Milliseconds())
	fmt.Fprintf(&b, "    timeout server %dms\n", in.IdleTimeout.Milliseconds())
	b.WriteString("    load-server-state-from-file global\n")

	b.WriteString("\n# Listener metadata (probe settings) that the runtime API shows nowhere else:\n")
	b.WriteString("# HAProxy loads the map because this backend uses it; `show map` reads it.\n")
	fmt.Fprintf(&b, "backend %s\n", metaBackend)
	fmt.Fprintf(&b, "    tcp-request content set-var(txn.zd_meta) str(),map(%s)\n", in.MapFile)

	m.WriteString("# zerodrop listener metadata: <proxy> <probe settings>\n")
	seen := map[string]bool{}
	for _, ps := range in.Proxies {
		name := ps.Name
		if name == "" {
			name = proxyName(ps.Key, ps.Listener.Name)
		}
		if seen[name] {
			return nil, nil, fmt.Errorf("render: two listeners map to proxy %s", name)
		}
		seen[name] = true
		if err := validateListener(ps.Listener); err != nil {
			return nil, nil, fmt.Errorf("render %s: %w", ps.Listener.Name, err)
		}
		renderProxy(&b, name, ps.Listener)
		fmt.Fprintf(&m, "%s %s\n", name, encodeProbe(ps.Listener.Probe))
	}
	return b.Bytes(), m.Bytes(), nil
}

func renderProxy(b *bytes.Buffer, name string, l model.Listener) {
	fmt.Fprintf(b, "\n# %s\n", l.Name)
	fmt.Fprintf(b, "listen %s\n", name)
	fmt.Fprintf(b, "    bind %s\n", hostPort(l.Address, l.Port))
	b.WriteString("    option socket-stats\n")
	b.WriteString("    balance roundrobin\n")
	if l.Probe.Kind == model.ProbeHTTP {
		fmt.Fprintf(b, "    option httpchk GET %s\n", httpPath(l.Probe))
	}
	for _, be := range l.Backends {
		be = renderedBackend(be)
		fmt.Fprintf(b, "    server %s %s weight %d %s", serverName(be.Address, be.Port), hostPort(be.Address, be.Port), be.Weight, checkArgs(l.Probe))
		if be.State == StateMaint {
			b.WriteString(" disabled")
		}
		b.WriteByte('\n')
	}
}

// renderedBackend is a backend with the weight HAProxy is given: a draining
// backend gets weight 0, so that it takes no new connections even when the
// server-state file (which carries the drain flag) is missing.
func renderedBackend(b model.Backend) model.Backend {
	switch {
	case b.State == model.Draining:
		b.Weight = 0
	case b.State == StateMaint:
	case b.Weight == 0:
		b.Weight = model.DefaultWeight
	}
	return b
}

// checkArgs are the health-check arguments of a server, in the form both the
// configuration and `add server` accept (a dynamic server does not inherit
// default-server settings, so they are always spelled out).
func checkArgs(p model.Probe) string {
	inter, rise, fall := p.IntervalMillis, p.Rise, p.Fall
	if inter <= 0 {
		inter = defaultInterMillis
	}
	if rise <= 0 {
		rise = defaultRise
	}
	if fall <= 0 {
		fall = defaultFall
	}
	// fastinter: a server in transition (DOWN going up after its first
	// passing check, UP going down after its first failure) is checked four
	// times as often, so a new pod serves, and a failing one leaves, sooner.
	// Only where the probe checks the backend's own port (IP mode): a probe
	// on another port checks a node (the health-check node port, kube-proxy's
	// healthz), and a node whose last local pod stops must not go down
	// before the node of its replacement comes up — with rise 2 and fall 3
	// at one interval it cannot; at fastinter it did (the lab's
	// rollout-local lost requests under load).
	s := fmt.Sprintf("check inter %d rise %d fall %d", inter, rise, fall)
	if p.Port == 0 {
		s = fmt.Sprintf("check inter %d fastinter %d rise %d fall %d", inter, max(inter/4, min(inter, 100)), rise, fall)
	}
	if p.Port != 0 {
		s += fmt.Sprintf(" port %d", p.Port)
	}
	return s
}

func httpPath(p model.Probe) string {
	if p.Path == "" {
		return "/"
	}
	return p.Path
}

// validateListener rejects what HAProxy cannot serve or what would not
// survive the trip through the configuration text.
func validateListener(l model.Listener) error {
	if l.Protocol != model.TCP {
		return fmt.Errorf("protocol %q is not supported (HAProxy balances TCP only)", l.Protocol)
	}
	if net.ParseIP(l.Address) == nil {
		return fmt.Errorf("address %q is not an IP address", l.Address)
	}
	if l.Port <= 0 || l.Port > 65535 {
		return fmt.Errorf("port %d out of range", l.Port)
	}
	p := l.Probe
	switch p.Kind {
	case model.ProbeTCP, "":
	case model.ProbeHTTP:
		if strings.ContainsFunc(p.Path, func(r rune) bool { return r <= ' ' || r > '~' || strings.ContainsRune(`"'#\`, r) }) {
			return fmt.Errorf("probe path %q has characters HAProxy's configuration cannot carry", p.Path)
		}
	default:
		return fmt.Errorf("probe kind %q is not supported", p.Kind)
	}
	if p.Port < 0 || p.Port > 65535 || p.IntervalMillis < 0 || p.Rise < 0 || p.Fall < 0 {
		return fmt.Errorf("probe %+v out of range", p)
	}
	for _, be := range l.Backends {
		if net.ParseIP(be.Address) == nil {
			return fmt.Errorf("backend %s: address is not an IP address", be.ID())
		}
		if be.Port <= 0 || be.Port > 65535 {
			return fmt.Errorf("backend %s: port out of range", be.ID())
		}
		if be.Weight < 0 || be.Weight > maxWeight {
			return fmt.Errorf("backend %s: weight %d outside HAProxy's 0..%d", be.ID(), be.Weight, maxWeight)
		}
	}
	return nil
}

// encodeProbe is the metadata map value of a probe: a query string, so that
// it holds no space, comma or '#'.
func encodeProbe(p model.Probe) string {
	v := url.Values{}
	v.Set("kind", string(p.Kind))
	v.Set("inter", strconv.Itoa(int(p.IntervalMillis)))
	v.Set("rise", strconv.Itoa(int(p.Rise)))
	v.Set("fall", strconv.Itoa(int(p.Fall)))
	if p.Port != 0 {
		v.Set("port", strconv.Itoa(int(p.Port)))
	}
	if p.Path != "" {
		v.Set("path", p.Path)
	}
	return v.Encode()
}

// decodeProbe reverses encodeProbe.
func decodeProbe(s string) (model.Probe, error) {
	v, err := url.ParseQuery(s)
	if err != nil {
		return model.Probe{}, fmt.Errorf("probe metadata %q: %w", s, err)
	}
	num := func(name string) (int32, error) {
		if v.Get(name) == "" {
			return 0, nil
		}
		n, err := strconv.ParseInt(v.Get(name), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("probe metadata %q: %s: %w", s, name, err)
		}
		return int32(n), nil
	}
	p := model.Probe{Kind: model.ProbeKind(v.Get("kind")), Path: v.Get("path")}
	for _, f := range []struct {
		name string
		dst  *int32
	}{{"inter", &p.IntervalMillis}, {"rise", &p.Rise}, {"fall", &p.Fall}, {"port", &p.Port}} {
		if *f.dst, err = num(f.name); err != nil {
			return model.Probe{}, err
		}
	}
	return p, nil
}
