package upstream

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// The cloud's HAProxy configuration: its load balancers (State), and the
// one complete configuration rendered from them (render).
//
// The configuration is its load balancers' store, as Azure's resource is
// cloud-provider-azure's: the file carries the load balancers it was
// rendered from (one `# state:` line), so a restarted controller reads them
// back (the GET, HAProxy.Read), and the `description` HAProxy reports in
// `show info` is a hash of the file, so the cloud knows whether HAProxy
// runs what the file says.

// State is every load balancer of the cloud: what the configuration is
// rendered from.
type State struct {
	LoadBalancers []LB `json:"loadBalancers"`
}

// LB is one Service's load balancer: a frontend address, a rule per port
// and the backend pool (the nodes), shared by the rules as Azure's rules
// share the cluster's backend pool.
type LB struct {
	Name    string   `json:"name"`    // cloudprovider.DefaultLoadBalancerName: "a" and the Service's UID
	Service string   `json:"service"` // namespace/name (Azure tags the frontend with it)
	Address string   `json:"address"` // the frontend address
	Rules   []Rule   `json:"rules"`
	Pool    []Member `json:"pool"` // sorted by node name
}

// Rule is a load-balancing rule: frontend port to the pool's nodes at
// BackendPort, with its probe.
type Rule struct {
	Name        string `json:"name"` // <lb>-<protocol>-<port>, cloud-provider-azure's rule name
	Port        int32  `json:"port"`
	BackendPort int32  `json:"backendPort"` // the Service port's nodePort
	Probe       Probe  `json:"probe"`
	// SourceIP is Azure's SourceIP load distribution (sessionAffinity
	// ClientIP); otherwise Default, a hash of the 5-tuple.
	SourceIP bool `json:"sourceIP,omitempty"`
}

// Probe is a rule's health probe.
type Probe struct {
	Protocol        string `json:"protocol"` // ProbeTCP or ProbeHTTP
	Port            int32  `json:"port"`
	Path            string `json:"path,omitempty"` // HTTP only
	IntervalSeconds int32  `json:"intervalSeconds"`
	Threshold       int32  `json:"threshold"` // probeThreshold: consecutive results to change state
}

// Probe protocols.
const (
	ProbeTCP  = "Tcp"
	ProbeHTTP = "Http"
)

// Member is a node in the backend pool.
type Member struct {
	Node    string `json:"node"`
	Address string `json:"address"`
}

// find returns the load balancer named name, or nil.
func (s *State) find(name string) *LB {
	for i := range s.LoadBalancers {
		if s.LoadBalancers[i].Name == name {
			return &s.LoadBalancers[i]
		}
	}
	return nil
}

// put sets lb, replacing the one of its name; the list stays sorted.
func (s *State) put(lb LB) {
	if old := s.find(lb.Name); old != nil {
		*old = lb
		return
	}
	s.LoadBalancers = append(s.LoadBalancers, lb)
	slices.SortFunc(s.LoadBalancers, func(a, b LB) int { return strings.Compare(a.Name, b.Name) })
}

// remove deletes the load balancer named name and reports whether there
// was one.
func (s *State) remove(name string) bool {
	n := len(s.LoadBalancers)
	s.LoadBalancers = slices.DeleteFunc(s.LoadBalancers, func(lb LB) bool { return lb.Name == name })
	return len(s.LoadBalancers) != n
}

// stateLine starts the configuration's line that carries the State.
const stateLine = "# state: "

// descriptionPrefix starts the global description: the rest is the hash
// of the configuration without that line, which `show info` reports back.
const descriptionPrefix = "lab-upstream-cloud "

// Data path: what an Azure Standard Load Balancer rule does with a flow,
// as far as HAProxy can be told.
const (
	// idleTimeout is a rule's idle timeout: cloud-provider-azure leaves
	// IdleTimeoutInMinutes at 4 unless the Service's
	// service.beta.kubernetes.io/azure-load-balancer-tcp-idle-timeout
	// annotation says otherwise (getExpectedLoadBalancingRulePropertiesForPort).
	idleTimeout = 4 * time.Minute
	// connectTimeout: Azure forwards a flow's packets and times out no
	// connection attempt of its own; a backend that does not answer is
	// given up by the client. HAProxy must have a connect timeout: longer
	// than the lab client's (2 s), so that the client's decides, as with
	// Azure.
	connectTimeout = 5 * time.Second
)

// render is the configuration of st: a function of its arguments only, so
// the same load balancers always render to the same bytes.
func (h *HAProxy) render(st State) ([]byte, error) {
	stateJSON, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString("# Written by the lab's upstream cloud (internal/lab/upstream), which programs HAProxy\n")
	b.WriteString("# as cloud-provider-azure programs an Azure Standard Load Balancer. Rewritten whole.\n")
	b.WriteString(stateLine)
	b.Write(stateJSON)
	b.WriteString("\nglobal\n")
	fmt.Fprintf(&b, "    stats socket %s mode 600 level admin expose-fd listeners\n", h.AdminSocket)
	fmt.Fprintf(&b, "    server-state-file %s\n", h.StateFile)
	b.WriteString("\ndefaults\n")
	b.WriteString("    mode tcp\n")
	// Azure's load balancer passes a flow to one backend and never tries
	// another: no retry, no redispatch.
	b.WriteString("    retries 0\n")
	fmt.Fprintf(&b, "    timeout connect %dms\n", connectTimeout.Milliseconds())
	fmt.Fprintf(&b, "    timeout client %dms\n", idleTimeout.Milliseconds())
	fmt.Fprintf(&b, "    timeout server %dms\n", idleTimeout.Milliseconds())
	b.WriteString("    load-server-state-from-file global\n")
	for _, lb := range st.LoadBalancers {
		for _, r := range lb.Rules {
			if err := renderRule(&b, lb, r); err != nil {
				return nil, err
			}
		}
	}
	sum := sha256.Sum256(b.Bytes())
	desc := fmt.Sprintf("    description %s%s\n", descriptionPrefix, hex.EncodeToString(sum[:12]))
	out := b.Bytes()
	i := bytes.Index(out, []byte("\nglobal\n")) + len("\nglobal\n")
	return slices.Concat(out[:i], []byte(desc), out[i:]), nil
}

func renderRule(b *bytes.Buffer, lb LB, r Rule) error {
	addr := net.ParseIP(lb.Address)
	if addr == nil || addr.To4() == nil {
		return fmt.Errorf("load balancer %s: frontend address %q is not IPv4", lb.Name, lb.Address)
	}
	if !validName(r.Name) {
		return fmt.Errorf("load balancer %s: rule name %q", lb.Name, r.Name)
	}
	p := r.Probe
	fmt.Fprintf(b, "\n# %s port %d\n", lb.Service, r.Port)
	fmt.Fprintf(b, "listen %s\n", r.Name)
	fmt.Fprintf(b, "    bind %s:%d\n", lb.Address, r.Port)
	if r.SourceIP {
		b.WriteString("    balance source\n")
	} else {
		// Default distribution, a hash of the 5-tuple: for every new
		// connection (a new source port) any backend in rotation alike.
		b.WriteString("    balance random(1)\n")
	}
	switch p.Protocol {
	case ProbeTCP:
	case ProbeHTTP:
		if p.Path == "" || strings.ContainsFunc(p.Path, func(c rune) bool { return c <= ' ' || c > '~' || strings.ContainsRune(`"'#\`, c) }) {
			return fmt.Errorf("rule %s: probe path %q", r.Name, p.Path)
		}
		// An HTTP probe passes on 200 OK only (the Azure probe API).
		fmt.Fprintf(b, "    option httpchk GET %s\n", p.Path)
		b.WriteString("    http-check expect status 200\n")
	default:
		return fmt.Errorf("rule %s: probe protocol %q", r.Name, p.Protocol)
	}
	for _, m := range lb.Pool {
		ip := net.ParseIP(m.Address)
		if ip == nil || ip.To4() == nil || !validName(m.Node) {
			return fmt.Errorf("load balancer %s: pool member %s %q", lb.Name, m.Node, m.Address)
		}
		fmt.Fprintf(b, "    server %s %s:%d %s\n", m.Node, m.Address, r.BackendPort, checkArgs(p))
	}
	return nil
}

// checkArgs: the probe every IntervalSeconds on its port, Threshold
// consecutive results to change a backend's state either way.
func checkArgs(p Probe) string {
	return fmt.Sprintf("check inter %ds rise %d fall %d port %d", p.IntervalSeconds, p.Threshold, p.Threshold, p.Port)
}

// validName: what HAProxy accepts in a proxy or server name (letters,
// digits, '-', '_', '.', ':'), and not empty.
func validName(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.:", c))
	})
}

// description returns the global description a rendered configuration
// carries.
func description(cfg []byte) string {
	for _, line := range strings.Split(string(cfg), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "description "); ok {
			return v
		}
	}
	return ""
}
