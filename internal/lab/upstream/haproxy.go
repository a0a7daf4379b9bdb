package upstream

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file is the cloud's own HAProxy writer and reader. It shares nothing
// with zerodrop's HAProxy provider: it renders one complete configuration
// for all of its load balancers, and when that differs from what HAProxy
// runs it writes the file and reloads HAProxy through the master CLI. That
// is its only write: one `reload` on the master socket. It never changes a
// server through the runtime API.
//
// The configuration is its load balancers' store, as Azure's resource is
// cloud-provider-azure's: the file carries the load balancers it was
// rendered from (one `# state:` line), so a restarted controller reads them
// back (the GET), and the `description` HAProxy reports in `show info` is a
// hash of the file, so the cloud knows whether HAProxy runs what the file
// says.
//
// A reload starts a new HAProxy worker, whose health checks would start
// afresh: before it, the running worker's server states are saved to the
// server-state file the configuration names (`show servers state`, the way
// HAProxy's management guide keeps states across reloads), so a backend the
// probe holds out of rotation stays out. A backend new to a rule gets a
// state line of its own: out of rotation until probeThreshold probes pass.

// HAProxy is the writer of one HAProxy instance in master-worker mode,
// which someone else started (the lab) with the configuration file Config,
// the admin socket AdminSocket (the configuration rendered here names the
// same path, so a reload keeps the socket) and the master CLI MasterSocket.
type HAProxy struct {
	Config       string
	AdminSocket  string
	MasterSocket string
	// StateFile is the server-state file HAProxy loads at a reload.
	StateFile string
	// Binary is the haproxy executable that checks a configuration
	// (`-c`) before it is written.
	Binary string
	// ReloadTimeout bounds the wait for the new worker after a reload.
	ReloadTimeout time.Duration
}

// NewHAProxy is the writer of the HAProxy whose files are in dir:
// haproxy.cfg, admin.sock, master.sock (the lab's layout).
func NewHAProxy(dir, binary string) *HAProxy {
	if binary == "" {
		binary = "haproxy"
	}
	return &HAProxy{
		Config:        filepath.Join(dir, "haproxy.cfg"),
		AdminSocket:   filepath.Join(dir, "admin.sock"),
		MasterSocket:  filepath.Join(dir, "master.sock"),
		StateFile:     filepath.Join(dir, "upstream-server-state"),
		Binary:        binary,
		ReloadTimeout: 10 * time.Second,
	}
}

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

// Read returns the load balancers of the configuration file and its bytes:
// none when the file is missing or was not written here (the lab starts
// HAProxy with a configuration of no load balancers).
func (h *HAProxy) Read() (State, []byte, error) {
	cfg, err := os.ReadFile(h.Config)
	if errors.Is(err, os.ErrNotExist) {
		return State{}, nil, nil
	}
	if err != nil {
		return State{}, nil, err
	}
	var st State
	for _, line := range strings.Split(string(cfg), "\n") {
		if v, ok := strings.CutPrefix(line, stateLine); ok {
			if err := json.Unmarshal([]byte(v), &st); err != nil {
				return State{}, nil, fmt.Errorf("%s: state line: %w", h.Config, err)
			}
			break
		}
	}
	return st, cfg, nil
}

// Running is the description of the configuration HAProxy's worker runs
// (`show info`): "" for one not written here.
func (h *HAProxy) Running(ctx context.Context) (string, error) {
	out, err := cli(ctx, h.AdminSocket, "show info")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "description: "); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", nil
}

// Apply makes HAProxy run st's configuration and reports whether it wrote:
// nothing is written when the file already is that configuration and
// HAProxy runs it.
func (h *HAProxy) Apply(ctx context.Context, st State) (bool, error) {
	cfg, err := h.render(st)
	if err != nil {
		return false, err
	}
	_, current, err := h.Read()
	if err != nil {
		return false, err
	}
	want := description(cfg)
	running, err := h.Running(ctx)
	if err != nil {
		return false, fmt.Errorf("read HAProxy: %w", err)
	}
	if bytes.Equal(cfg, current) && running == want {
		return false, nil
	}
	if err := h.saveServerStates(ctx, st); err != nil {
		return false, err
	}
	tmp := h.Config + ".upstream.tmp"
	if err := os.WriteFile(tmp, cfg, 0o644); err != nil {
		return false, err
	}
	if out, err := exec.CommandContext(ctx, h.Binary, "-c", "-q", "-f", tmp).CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return false, fmt.Errorf("haproxy -c: %w: %s", err, bytes.TrimSpace(out))
	}
	if err := os.Rename(tmp, h.Config); err != nil {
		return false, err
	}
	if _, err := cli(ctx, h.MasterSocket, "reload"); err != nil {
		return true, fmt.Errorf("reload HAProxy: %w", err)
	}
	deadline := time.Now().Add(h.ReloadTimeout)
	for {
		if running, err = h.Running(ctx); err == nil && running == want {
			return true, nil
		}
		if time.Now().After(deadline) {
			return true, fmt.Errorf("HAProxy runs configuration %q %s after a reload, want %q (%v)", running, h.ReloadTimeout, want, err)
		}
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// saveServerStates writes the server-state file the next worker loads: the
// running worker's state of every server st keeps (same rule, node,
// address and port), and for every other server of st a state out of
// rotation with its checks not yet run, so that it takes Threshold passing
// probes to serve. Format: `show servers state`, version 1, of HAProxy 2.6;
// HAProxy matches lines by proxy and server name.
func (h *HAProxy) saveServerStates(ctx context.Context, st State) error {
	out, err := cli(ctx, h.AdminSocket, "show servers state")
	if err != nil {
		return fmt.Errorf("read server states: %w", err)
	}
	type srv struct{ proxy, name string }
	want := map[srv]string{} // → "address port"
	var order []srv
	seed := map[srv]string{}
	for _, lb := range st.LoadBalancers {
		for _, r := range lb.Rules {
			for _, m := range lb.Pool {
				k := srv{r.Name, m.Node}
				want[k] = fmt.Sprintf("%s %d", m.Address, r.BackendPort)
				order = append(order, k)
				// be_id be_name srv_id srv_name srv_addr srv_op_state(0 stopped)
				// srv_admin_state srv_uweight srv_iweight srv_time_since_last_change
				// srv_check_status(1 INI) srv_check_result srv_check_health(0)
				// srv_check_state(6 enabled, configured) srv_agent_state
				// bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord
				// srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port
				seed[k] = fmt.Sprintf("0 %s 0 %s %s 0 0 1 1 0 1 0 0 6 0 0 0 - %d - 0 %d - - 0",
					r.Name, m.Node, m.Address, r.BackendPort, r.Probe.Port)
			}
		}
	}
	var b strings.Builder
	b.WriteString("1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight " +
		"srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state " +
		"bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr " +
		"srv_agent_addr srv_agent_port\n")
	kept := map[srv]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 19 || strings.HasPrefix(f[0], "#") {
			continue
		}
		k := srv{f[1], f[3]}
		if w, ok := want[k]; ok && w == f[4]+" "+f[18] && !kept[k] {
			kept[k] = true
			b.WriteString(sc.Text())
			b.WriteByte('\n')
		}
	}
	for _, k := range order {
		if !kept[k] {
			b.WriteString(seed[k])
			b.WriteByte('\n')
		}
	}
	return writeFile(h.StateFile, []byte(b.String()))
}

// writeFile replaces path with data through a rename, so HAProxy never
// reads half of it.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// cli sends one command to an HAProxy CLI socket (admin or master) and
// returns the whole answer: HAProxy answers the command of a
// non-interactive connection and closes it.
func cli(ctx context.Context, path, command string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, command+"\n"); err != nil {
		return "", err
	}
	// The master CLI keeps a connection open until the client's side ends.
	if uc, ok := c.(*net.UnixConn); ok {
		_ = uc.CloseWrite()
	}
	out, err := io.ReadAll(c)
	if err != nil {
		return "", fmt.Errorf("%s: %s: %w", path, command, err)
	}
	return string(out), nil
}

// Backend is one backend of a load balancer's rule as HAProxy's `show stat`
// shows it.
type Backend struct {
	Rule        string // the rule's proxy name
	Port        int32  // the rule's frontend port
	Node        string
	Address     string
	BackendPort int32
	Status      string // HAProxy's: UP, DOWN, "UP 1/2" (up, one failed probe), "DOWN 1/2", MAINT, …
	CheckStatus string // the last probe's result (INI: none ran yet)
	Sessions    int64  // current connections
}

// Up reports whether the backend is in rotation: UP, or UP with failed
// probes short of the threshold.
func (b Backend) Up() bool { return strings.HasPrefix(b.Status, "UP") }

// ReadBackends returns the backends of load balancer lb (its rules are
// the proxies named lb-…) from `show stat` at adminSocket, for the lab's
// reports.
func ReadBackends(ctx context.Context, adminSocket, lb string) ([]Backend, error) {
	out, err := cli(ctx, adminSocket, "show stat")
	if err != nil {
		return nil, err
	}
	rows, err := csv.NewReader(strings.NewReader(strings.TrimPrefix(out, "# "))).ReadAll()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("show stat: %w", err)
	}
	if len(rows) == 0 {
		return nil, errors.New("show stat: no header")
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	for _, c := range []string{"pxname", "svname", "scur", "status", "check_status", "addr", "type"} {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("show stat: no %s column", c)
		}
	}
	var bs []Backend
	for _, row := range rows[1:] {
		if len(row) != len(rows[0]) || row[col["type"]] != "2" || !strings.HasPrefix(row[col["pxname"]], lb+"-") {
			continue
		}
		rule := row[col["pxname"]]
		port, err := strconv.ParseInt(rule[strings.LastIndexByte(rule, '-')+1:], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("show stat: rule %q has no port", rule)
		}
		host, bport, err := net.SplitHostPort(row[col["addr"]])
		if err != nil {
			return nil, fmt.Errorf("show stat: %s/%s addr: %w", rule, row[col["svname"]], err)
		}
		bp, err := strconv.ParseInt(bport, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("show stat: %s/%s port: %w", rule, row[col["svname"]], err)
		}
		scur, _ := strconv.ParseInt(row[col["scur"]], 10, 64)
		bs = append(bs, Backend{Rule: rule, Port: int32(port), Node: row[col["svname"]], Address: host, BackendPort: int32(bp),
			Status: row[col["status"]], CheckStatus: row[col["check_status"]], Sessions: scur})
	}
	return bs, nil
}
