package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// This file is the cloud's own HAProxy writer and reader, sharing nothing
// with zerodrop's HAProxy provider (docs/lab.md, "How it writes HAProxy"):
// one complete configuration (haproxy_config.go's) for all its load
// balancers, written and reloaded through the master CLI only when it
// differs from what HAProxy runs — its only write; before the reload, the
// server states are saved (saveServerStates) so that the new worker's
// checks do not start afresh.

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
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, h.ReloadTimeout, true, func(ctx context.Context) (bool, error) {
		running, last = h.Running(ctx)
		return last == nil && running == want, nil
	}); err != nil {
		return true, fmt.Errorf("HAProxy runs configuration %q %s after a reload, want %q (%v): %w", running, h.ReloadTimeout, want, last, err)
	}
	return true, nil
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
