package haproxy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// StateMaint is the state Observe reports for a server that HAProxy holds in
// maintenance (for instance one whose `add server` succeeded but whose
// `set server … state ready` did not). It is never desired, so Diff always
// plans an update that sets the server ready or draining.
const StateMaint model.BackendState = "maint"

// Server admin-state flags of `show servers state` (HAProxy 2.6 srv_admin).
const (
	adminForcedMaint    = 0x01
	adminInheritedMaint = 0x02
	adminConfigMaint    = 0x04
	adminForcedDrain    = 0x08
	adminInheritedDrain = 0x10
	adminResolverMaint  = 0x20
	adminHostnameMaint  = 0x40

	adminMaintMask = adminForcedMaint | adminInheritedMaint | adminConfigMaint | adminResolverMaint | adminHostnameMaint
	adminDrainMask = adminForcedDrain | adminInheritedDrain
)

// Server operational states (srv_op_state) and check-state flags.
const (
	opRunning  = 2
	opStopping = 3

	checkEnabled = 0x04
)

// serverStateRow is one row of `show servers state`.
type serverStateRow struct {
	Backend    string
	Name       string
	Addr       string
	Port       int32
	OpState    int
	AdminState int
	UWeight    int32
	CheckState int
}

// parseServersState parses `show servers state` (format version 1), locating
// columns by the header.
func parseServersState(text string) ([]serverStateRow, error) {
	return parseServersStateFrom(strings.NewReader(text))
}

// parseServersStateFrom is parseServersState reading the reply from r line
// by line, as it arrives: the reply is never held whole.
func parseServersStateFrom(r io.Reader) ([]serverStateRow, error) {
	names := []string{"be_name", "srv_name", "srv_addr", "srv_op_state", "srv_admin_state", "srv_uweight", "srv_check_state", "srv_port"}
	var (
		version bool
		idx     []int
		ncol    int
		rows    []serverStateRow
		f       []string
	)
	// Tens of thousands of lines at every snapshot: one slice of fields
	// serves them all, and the strings kept are copied, so that a line is
	// not held for as long as the snapshot is (be_name is replaced by the
	// proxy's own name: buildSnapshot).
	err := eachLine(r, func(line string) error {
		switch {
		case !version:
			if strings.TrimSpace(line) == "" {
				return nil
			}
			if strings.TrimSpace(line) != "1" {
				return fmt.Errorf("show servers state: unknown format %q", line)
			}
			version = true
			return nil
		case idx == nil:
			if !strings.HasPrefix(line, "# ") {
				return fmt.Errorf("show servers state: no header")
			}
			header := strings.Fields(strings.TrimPrefix(line, "# "))
			col := map[string]int{}
			for i, h := range header {
				col[h] = i
			}
			idx = make([]int, len(names))
			for i, need := range names {
				c, ok := col[need]
				if !ok {
					return fmt.Errorf("show servers state: no %q column", need)
				}
				idx[i] = c
			}
			ncol, f = len(col), make([]string, 0, len(header))
			return nil
		}
		f = appendFields(f[:0], line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			return nil
		}
		if len(f) < ncol {
			return fmt.Errorf("show servers state: short line %q", line)
		}
		var n [5]int
		for i := range n {
			v, err := strconv.Atoi(f[idx[3+i]])
			if err != nil {
				return fmt.Errorf("show servers state: %s in %q: %w", names[3+i], line, err)
			}
			n[i] = v
		}
		rows = append(rows, serverStateRow{
			Backend: f[idx[0]], Name: strings.Clone(f[idx[1]]), Addr: strings.Clone(f[idx[2]]),
			OpState: n[0], AdminState: n[1], UWeight: int32(n[2]), CheckState: n[3], Port: int32(n[4]),
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch {
	case !version:
		return nil, fmt.Errorf("show servers state: unknown format %q", "")
	case idx == nil:
		return nil, fmt.Errorf("show servers state: no header")
	}
	return rows, nil
}

// appendFields appends the words of line (separated by spaces and tabs, as
// HAProxy writes them) to f.
func appendFields(f []string, line string) []string {
	for {
		line = strings.TrimLeft(line, " \t\r")
		if line == "" {
			return f
		}
		end := strings.IndexAny(line, " \t\r")
		if end < 0 {
			return append(f, line)
		}
		f = append(f, line[:end])
		line = line[end:]
	}
}

// replyUnknownMap starts the reply of `show map <file>` when HAProxy has not
// loaded the file (the running configuration is not one zerodrop rendered).
const replyUnknownMap = "Unknown map identifier"

// parseMap parses `show map <file>`: "<ref> <key> <value>" per line.
func parseMap(text string) (map[string]string, error) { return parseMapFrom(strings.NewReader(text)) }

// parseMapFrom is parseMap reading the reply from r line by line.
func parseMapFrom(r io.Reader) (map[string]string, error) {
	out := map[string]string{}
	unknown := false
	err := eachLine(r, func(line string) error {
		line = strings.TrimSpace(line)
		if line == "" || unknown {
			return nil
		}
		if strings.HasPrefix(line, replyUnknownMap) {
			unknown = true
			return nil
		}
		ref, rest, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(ref, "0x") {
			return fmt.Errorf("show map: unexpected line %q", line)
		}
		key, value, _ := strings.Cut(rest, " ")
		// Copied: the line is not kept for as long as the map is.
		out[strings.Clone(key)] = strings.Clone(value)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// snapshot is what the runtime API showed of every zerodrop proxy.
type snapshot struct {
	proxies map[string]*proxyView // by proxy name
	// byKey has every load balancer's proxies, sorted by name: one snapshot
	// serves thousands of Observe calls, which must not each scan them all.
	byKey map[string][]*proxyView
}

// proxyView is one zerodrop proxy as observed.
type proxyView struct {
	Name     string
	Key      string
	Listener string
	Address  string
	Port     int32
	Probe    model.Probe
	Servers  []serverView
}

// serverView is one server as observed.
type serverView struct {
	serverStateRow
	Status      string
	CheckStatus string
	Scur        int64
}

func (s serverView) backend() model.Backend {
	b := model.Backend{Address: s.Addr, Port: s.Port, Weight: s.UWeight, State: model.Active}
	switch {
	case s.AdminState&adminMaintMask != 0:
		b.State = StateMaint
	case s.AdminState&adminDrainMask != 0 || s.UWeight == 0:
		// Weight 0 takes no new connections either: it is a drain.
		b.State, b.Weight = model.Draining, 0
	}
	return b
}

// buildSnapshot joins the three readings into proxies.
func buildSnapshot(stat []StatRow, servers []serverStateRow, meta map[string]string) *snapshot {
	s := &snapshot{proxies: map[string]*proxyView{}}
	for _, r := range stat {
		pv := s.proxies[r.Proxy]
		if pv == nil {
			key, listener, ok := parseProxyName(r.Proxy)
			if !ok {
				continue
			}
			pv = &proxyView{Name: r.Proxy, Key: key, Listener: listener}
			if v, ok := meta[r.Proxy]; ok {
				// Undecodable metadata leaves a zero probe: Diff then plans an
				// update-listener, which renders the metadata again.
				pv.Probe, _ = decodeProbe(v)
			}
			s.proxies[r.Proxy] = pv
		}
		if r.Type == statListener && pv.Address == "" {
			pv.Address, pv.Port = splitStatAddr(r.Addr)
		}
	}
	type server struct{ proxy, name string }
	status := map[server]*StatRow{}
	for i := range stat {
		if r := &stat[i]; r.Type == statServer {
			status[server{r.Proxy, r.Name}] = r
		}
	}
	for _, row := range servers {
		pv := s.proxies[row.Backend]
		if pv == nil {
			continue
		}
		// The proxy's name, not the reply's: see parseServersState.
		row.Backend = pv.Name
		var st StatRow
		if r := status[server{row.Backend, row.Name}]; r != nil {
			st = *r
		}
		pv.Servers = append(pv.Servers, serverView{serverStateRow: row, Status: st.Status, CheckStatus: st.CheckStatus, Scur: st.Scur})
	}
	s.byKey = map[string][]*proxyView{}
	for _, pv := range s.proxies {
		s.byKey[pv.Key] = append(s.byKey[pv.Key], pv)
	}
	for _, pvs := range s.byKey {
		sort.Slice(pvs, func(i, j int) bool { return pvs[i].Name < pvs[j].Name })
	}
	return s
}

// splitStatAddr splits show stat's "addr" ("127.0.0.1:80", "[::1]:80").
func splitStatAddr(addr string) (string, int32) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", 0
	}
	port, err := strconv.ParseUint(addr[i+1:], 10, 16)
	if err != nil {
		return "", 0
	}
	return strings.TrimSuffix(strings.TrimPrefix(addr[:i], "["), "]"), int32(port)
}

// proxiesOf returns the proxies of one load balancer, sorted by name.
func (s *snapshot) proxiesOf(key string) []*proxyView {
	return s.byKey[key]
}

// proxy returns the proxy that serves listener of key, or nil.
func (s *snapshot) proxy(key, listener string) *proxyView {
	pv := s.proxies[proxyName(key, listener)]
	if pv == nil || pv.Key != key || pv.Listener != listener {
		return nil
	}
	return pv
}

// server returns the server of pv that serves backend id (address:port).
func (pv *proxyView) server(b model.Backend) *serverView {
	for i := range pv.Servers {
		if pv.Servers[i].Addr == b.Address && pv.Servers[i].Port == b.Port {
			return &pv.Servers[i]
		}
	}
	return nil
}

// loadBalancer is the model of one key, canonical and versioned, or nil
// when HAProxy serves nothing for it.
func (s *snapshot) loadBalancer(key string) *model.LoadBalancer {
	return lbOf(key, s.proxiesOf(key))
}

// lbOf is loadBalancer for key's proxies pvs, sorted by name.
func lbOf(key string, pvs []*proxyView) *model.LoadBalancer {
	lb := unversionedOf(key, pvs)
	if lb != nil {
		lb.Version = version(lb)
	}
	return lb
}

// unversionedOf is lbOf without the version: what a configuration is
// rendered from, which never reads it (a version is a JSON encoding and a
// hash of the load balancer, for each of thousands at every reload).
func unversionedOf(key string, pvs []*proxyView) *model.LoadBalancer {
	if len(pvs) == 0 {
		return nil
	}
	lb := &model.LoadBalancer{Key: key}
	for _, pv := range pvs {
		l := model.Listener{Name: pv.Listener, Address: pv.Address, Port: pv.Port, Protocol: model.TCP, Probe: pv.Probe}
		for _, sv := range pv.Servers {
			l.Backends = append(l.Backends, sv.backend())
		}
		lb.Listeners = append(lb.Listeners, l)
	}
	return model.Canonical(lb)
}

// all is every load balancer HAProxy serves, by key.
func (s *snapshot) all() map[string]*model.LoadBalancer {
	out := make(map[string]*model.LoadBalancer, len(s.byKey))
	for key, pvs := range s.byKey {
		out[key] = lbOf(key, pvs)
	}
	return out
}

// unversioned is all without the versions, to render a configuration from.
func (s *snapshot) unversioned() map[string]*model.LoadBalancer {
	out := make(map[string]*model.LoadBalancer, len(s.byKey))
	for key, pvs := range s.byKey {
		out[key] = unversionedOf(key, pvs)
	}
	return out
}

// version hashes the canonical observed state of one load balancer. HAProxy
// has no ETag; two observations with the same listeners, probes, servers,
// weights and admin states have the same version. Health and connection
// counts are not part of it.
func version(lb *model.LoadBalancer) string {
	if lb == nil {
		return ""
	}
	c := model.Canonical(lb)
	c.Version = ""
	data, err := json.Marshal(c)
	if err != nil {
		// A LoadBalancer always marshals; keep the version distinct anyway.
		return "unversioned"
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:12])
}

// snapshot reads the runtime API: `show stat`, `show servers state` and the
// metadata map. Three reads, not atomic together; see Apply for what that
// means for concurrency. Each reply is parsed as it arrives, never held
// whole, and one snapshot is read at a time (Provider.reading): at 10,000
// load balancers the replies were 45 MiB and their rows 40 MiB of a
// data-plane replica's heap, with several readings under way at once.
func (p *Provider) snapshot(ctx context.Context) (*snapshot, error) {
	p.reading.Lock()
	defer p.reading.Unlock()
	// Listeners and servers only (the type mask 8|4): their rows are all
	// the snapshot reads, and a proxy's FRONTEND and BACKEND rows were two
	// in five of a reply that is megabytes at thousands of load balancers.
	// Every zerodrop proxy has a listener row (option socket-stats).
	var stat []StatRow
	if err := p.readStream(ctx, "show-stat", "show stat -1 12 -1", func(r *bufio.Reader) (err error) {
		stat, err = parseStatFrom(r)
		return err
	}); err != nil {
		return nil, err
	}
	var servers []serverStateRow
	if err := p.readStream(ctx, "show-servers-state", "show servers state", func(r *bufio.Reader) (err error) {
		servers, err = parseServersStateFrom(r)
		return err
	}); err != nil {
		return nil, err
	}
	var meta map[string]string
	if err := p.readStream(ctx, "show-map", "show map "+p.paths.meta, func(r *bufio.Reader) (err error) {
		meta, err = parseMapFrom(r)
		return err
	}); err != nil {
		return nil, err
	}
	return buildSnapshot(stat, servers, meta), nil
}

// Observe reads the load balancer from HAProxy's runtime API (never from
// memory): the listeners, probes and servers of key's proxies, with a
// version that is a hash of them. It returns (nil, nil) when HAProxy serves
// nothing for key.
//
// When a write left the configuration file behind the runtime (its mirror
// failed), Observe first tries the mirror again.
func (p *Provider) Observe(ctx context.Context, key string) (*model.LoadBalancer, error) {
	p.retryMirror(ctx)
	snap, err := p.shared(ctx)
	if err != nil {
		return nil, fmt.Errorf("haproxy: observe %s: %w", key, err)
	}
	return snap.loadBalancer(key), nil
}

// Peek is Observe without its side effect: it never retries the mirror
// into the configuration file. It is what the data-plane state endpoint
// serves: a read from outside the replica never makes it write.
func (p *Provider) Peek(ctx context.Context, key string) (*model.LoadBalancer, error) {
	snap, err := p.shared(ctx)
	if err != nil {
		return nil, fmt.Errorf("haproxy: observe %s: %w", key, err)
	}
	return snap.loadBalancer(key), nil
}

// List returns every load balancer HAProxy serves under a zerodrop name
// (`zd:` proxies), by key, from the shared runtime snapshot.
func (p *Provider) List(ctx context.Context) (map[string]*model.LoadBalancer, error) {
	snap, err := p.shared(ctx)
	if err != nil {
		return nil, fmt.Errorf("haproxy: list: %w", err)
	}
	return snap.all(), nil
}

// Backends reports every server of key's proxies: state, health as HAProxy's
// checks see it, and current connections (`scur`) summed over the current
// worker and the old workers that still serve connections after a reload.
func (p *Provider) Backends(ctx context.Context, key string) ([]provider.BackendStatus, error) {
	snap, err := p.shared(ctx)
	if err != nil {
		return nil, fmt.Errorf("haproxy: backends %s: %w", key, err)
	}
	old, err := p.sharedOldConns(ctx)
	if err != nil {
		return nil, fmt.Errorf("haproxy: backends %s: %w", key, err)
	}
	var out []provider.BackendStatus
	for _, pv := range snap.proxiesOf(key) {
		for _, sv := range pv.Servers {
			b := sv.backend()
			// A server whose checks have not run yet is not healthy: the
			// readiness gate must wait for the first passing checks. A
			// server HAProxy holds down (`set server … health down` with
			// its checks off: an addServer interrupted before `enable
			// health`) is known not to serve, checks or not.
			checked := sv.CheckState&checkEnabled != 0
			ran := checked && sv.CheckStatus != "" && sv.CheckStatus != "INI" && sv.CheckStatus != "UNK"
			serving := sv.OpState == opRunning || sv.OpState == opStopping
			out = append(out, provider.BackendStatus{
				Listener:    pv.Listener,
				Address:     b.Address,
				Port:        b.Port,
				State:       b.State,
				Healthy:     ran && serving,
				HealthKnown: checked || !serving,
				Connections: sv.Scur + old[pv.Name+"/"+sv.Name],
			})
		}
	}
	return out, nil
}
