package bgp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test router: FRR's zebra and bgpd in a network namespace of their own,
// joined to the root namespace (where the speaker runs, in the test process)
// by a veth pair on a documentation prefix. FRR's configuration, sockets,
// pid files and logs live in the test's temporary directory, never in the
// system's /etc/frr or /var/run/frr.
const (
	frrDir     = "/usr/lib/frr"
	routerASN  = 64512
	nodeASN    = 64513
	md5Secret  = "zerodrop-test"
	routerName = "zdbgp" // prefix of every namespace and link the test makes
)

type frrRouter struct {
	ns       string     // network namespace
	link     string     // the veth end in the root namespace
	node     netip.Addr // the speaker's address (root namespace)
	addr     netip.Addr // the router's address
	dir      string
	cleanups []func()
	once     sync.Once
}

// startFRR makes the namespace, the link and the two daemons, and arranges
// that all of it goes away when the test ends, fails or is interrupted.
func startFRR(t *testing.T, ctx context.Context) *frrRouter {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the FRR test makes network namespaces and needs root")
	}
	for _, bin := range []string{"zebra", "bgpd", "vtysh"} {
		p := filepath.Join(frrDir, bin)
		if bin == "vtysh" {
			p = "/usr/bin/vtysh"
		}
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("FRR is not installed (%v): run make frr", err)
		}
	}
	removeStale(t)
	pid := os.Getpid()
	// One /30 per process, so that two test processes never share one.
	base := 4 * (pid % 64)
	r := &frrRouter{
		ns:   fmt.Sprintf("%s-%d-router", routerName, pid),
		link: fmt.Sprintf("%s%d", routerName, pid%10000000),
		node: netip.AddrFrom4([4]byte{198, 51, 100, byte(base + 2)}),
		addr: netip.AddrFrom4([4]byte{198, 51, 100, byte(base + 1)}),
	}
	// Not t.TempDir: its parent is closed to the frr user, which the
	// daemons drop to (FRR refuses to run as a user outside its vty group).
	dir, err := os.MkdirTemp("", routerName+"-")
	if err != nil {
		t.Fatal(err)
	}
	r.dir = dir
	r.onClose(func() { _ = os.RemoveAll(dir) })
	// Ctrl-C ends the test binary without running t.Cleanup.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	stopSig := make(chan struct{})
	go func() {
		select {
		case s := <-sig:
			r.close()
			fmt.Fprintf(os.Stderr, "interrupted (%v): removed namespace %s\n", s, r.ns)
			os.Exit(1)
		case <-stopSig:
		}
	}()
	t.Cleanup(func() {
		signal.Stop(sig)
		close(stopSig)
		if t.Failed() {
			for _, f := range []string{"bgpd.log", "zebra.log", "speaker.log"} {
				t.Logf("--- %s (tail)\n%s", f, tail(filepath.Join(r.dir, f), 40))
			}
		}
		r.close()
	})

	r.onClose(func() { _ = exec.Command("ip", "netns", "del", r.ns).Run() })
	peer := r.link + "r"
	for _, args := range [][]string{
		{"netns", "add", r.ns},
		{"link", "add", r.link, "type", "veth", "peer", "name", peer, "netns", r.ns},
		{"addr", "add", r.node.String() + "/30", "dev", r.link},
		{"link", "set", r.link, "up"},
		{"-n", r.ns, "link", "set", "lo", "up"},
		{"-n", r.ns, "addr", "add", r.addr.String() + "/30", "dev", peer},
		{"-n", r.ns, "link", "set", peer, "up"},
	} {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	// The root end goes with the namespace, but not if the namespace was
	// never made.
	r.onClose(func() { _ = exec.Command("ip", "link", "del", r.link).Run() })

	frr, err := user.Lookup("frr")
	if err != nil {
		t.Fatalf("FRR's user: %v", err)
	}
	uid, _ := strconv.Atoi(frr.Uid)
	gid, _ := strconv.Atoi(frr.Gid)
	write := func(name, text string) {
		p := filepath.Join(r.dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(r.dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	write("zebra.conf", "hostname zdrouter\n")
	write("vtysh.conf", "")
	// Passive: the speaker dials (it has no listener). Graceful restart in
	// helper mode is FRR's default; eBGP needs no policy for this test.
	write("bgpd.conf", fmt.Sprintf(`hostname zdrouter
router bgp %d
 bgp router-id %s
 no bgp ebgp-requires-policy
 neighbor %s remote-as %d
 neighbor %s passive
 neighbor %s password %s
 neighbor %s timers connect 1
`, routerASN, r.addr, r.node, nodeASN, r.node, r.node, md5Secret, r.node))
	common := []string{"-u", "frr", "-g", "frr", "-P", "0", "--vty_socket", r.dir, "-z", filepath.Join(r.dir, "zserv.api")}
	r.daemon(t, "zebra", append(common, "-f", filepath.Join(r.dir, "zebra.conf"), "-i", filepath.Join(r.dir, "zebra.pid"),
		"--log", "file:"+filepath.Join(r.dir, "zebra.log"))...)
	// bgpd connects to zebra's socket once it exists.
	r.waitFor(t, ctx, "zebra's socket", func() (bool, error) {
		_, err := os.Stat(filepath.Join(r.dir, "zserv.api"))
		return err == nil, nil
	})
	r.daemon(t, "bgpd", append(common, "-f", filepath.Join(r.dir, "bgpd.conf"), "-i", filepath.Join(r.dir, "bgpd.pid"),
		"--log", "file:"+filepath.Join(r.dir, "bgpd.log"))...)
	r.waitFor(t, ctx, "bgpd's neighbor", func() (bool, error) {
		_, err := r.neighbor(ctx)
		return err == nil, nil
	})
	return r
}

func (r *frrRouter) onClose(f func()) { r.cleanups = append(r.cleanups, f) }

func (r *frrRouter) close() {
	r.once.Do(func() {
		for i := len(r.cleanups) - 1; i >= 0; i-- {
			r.cleanups[i]()
		}
	})
}

// daemon starts one FRR daemon in the namespace, in the foreground, so the
// test owns it: it gets SIGTERM at the end (FRR then removes its sockets and
// its crash-log directory) and dies with the test process in any case.
func (r *frrRouter) daemon(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", r.ns, filepath.Join(frrDir, name)}, args...)...)
	out, err := os.Create(filepath.Join(r.dir, name+".out"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); out.Close(); close(done) }()
	// FRR keeps a per-process directory for crash logs that it does not
	// remove on exit.
	r.onClose(func() { _ = os.RemoveAll(fmt.Sprintf("/var/tmp/frr/%s.%d", name, cmd.Process.Pid)) })
	r.onClose(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
}

// waitFor polls cond every 20 ms until it holds, failing the test after 20 s.
func (r *frrRouter) waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last error: %v)", what, ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// route is one kernel route in the router's namespace, as `ip -j` shows it
// (its protocol is bgp: routes reads no other).
type route struct {
	Dst     string `json:"dst"`
	Gateway string `json:"gateway"`
	Dev     string `json:"dev"`
}

// routes reads the BGP routes zebra installed in the router's kernel table.
func (r *frrRouter) routes(ctx context.Context) (map[netip.Prefix]route, error) {
	out, err := exec.CommandContext(ctx, "ip", "-n", r.ns, "-j", "route", "show", "proto", "bgp").Output()
	if err != nil {
		return nil, fmt.Errorf("ip route show in %s: %w", r.ns, err)
	}
	var rs []route
	if err := json.Unmarshal(out, &rs); err != nil {
		return nil, fmt.Errorf("parse %q: %w", out, err)
	}
	m := make(map[netip.Prefix]route, len(rs))
	for _, rt := range rs {
		dst := rt.Dst
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		p, err := netip.ParsePrefix(dst)
		if err != nil {
			return nil, err
		}
		m[p] = rt
	}
	return m, nil
}

// vtysh runs a show command against this router's bgpd and decodes its JSON.
func (r *frrRouter) vtysh(ctx context.Context, command string, v any) error {
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", r.ns, "vtysh",
		"--vty_socket", r.dir, "--config_dir", r.dir, "-d", "bgpd", "-c", command)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("vtysh %q: %w: %s", command, err, stderr.Bytes())
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("vtysh %q: parse %q: %w", command, out, err)
	}
	return nil
}

// neighborState is the router's view of its session with the speaker.
type neighborState struct {
	State       string `json:"bgpState"`
	Established int    `json:"connectionsEstablished"`
	Dropped     int    `json:"connectionsDropped"`
	LastReset   string `json:"lastResetDueTo"`
	Messages    struct {
		UpdatesRecv int `json:"updatesRecv"`
	} `json:"messageStats"`
	GR struct {
		EndOfRibRecv map[string]bool `json:"endOfRibRecv"`
	} `json:"gracefulRestartInfo"`
}

func (r *frrRouter) neighbor(ctx context.Context) (neighborState, error) {
	var m map[string]json.RawMessage
	if err := r.vtysh(ctx, "show bgp neighbors "+r.node.String()+" json", &m); err != nil {
		return neighborState{}, err
	}
	raw, ok := m[r.node.String()]
	if !ok {
		return neighborState{}, fmt.Errorf("no neighbor %s in %v", r.node, m)
	}
	var n neighborState
	if err := json.Unmarshal(raw, &n); err != nil {
		return n, fmt.Errorf("parse neighbor: %w", err)
	}
	return n, nil
}

// ribEntry is bgpd's entry for one prefix.
type ribEntry struct {
	Version int // bumped by bgpd on any change to the prefix's paths
	Paths   int
	Stale   int // paths kept from a session closed for a graceful restart
}

func (r *frrRouter) ribEntry(ctx context.Context, prefix netip.Prefix) (ribEntry, error) {
	var v struct {
		Version int `json:"version"`
		Paths   []struct {
			Stale bool `json:"stale"`
		} `json:"paths"`
	}
	if err := r.vtysh(ctx, "show bgp ipv4 unicast "+prefix.String()+" json", &v); err != nil {
		return ribEntry{}, err
	}
	e := ribEntry{Version: v.Version, Paths: len(v.Paths)}
	for _, p := range v.Paths {
		if p.Stale {
			e.Stale++
		}
	}
	return e, nil
}

// removeStale deletes the namespaces of earlier runs whose process is gone
// (killed too hard to clean up); their veth ends go with them.
func removeStale(t *testing.T) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(line, " ")
		rest, ok := strings.CutPrefix(name, routerName+"-")
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			t.Logf("removing stale namespace %s", name)
			_ = exec.Command("ip", "netns", "del", name).Run()
		}
	}
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
