package bgp

import (
	"bytes"
	"context"
	"encoding/json"
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

// routerPrefix is a route of the router's own, which it announces to the
// speaker (and the speaker must not take).
var routerPrefix = netip.MustParsePrefix("198.51.100.128/25")

type frrRouter struct {
	ns     string     // network namespace
	link   string     // the veth end in the root namespace
	node   netip.Addr // the speaker's address (root namespace)
	addr   netip.Addr // the router's address
	dir    string
	reaper *reaper
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
	pid := os.Getpid()
	// One /30 per process in 198.51.100.0/25, so that two test processes
	// never share one.
	base := 4 * (pid % 32)
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
	rp, err := startReaper(r.ns, r.link, r.dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatal(err)
	}
	r.reaper = rp
	// Ctrl-C ends the test binary without running t.Cleanup; the reaper
	// would clean up after it anyway, but waiting for it lets a rerun
	// start on a clean machine.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	stopSig := make(chan struct{})
	go func() {
		select {
		case s := <-sig:
			err := rp.close()
			fmt.Fprintf(os.Stderr, "interrupted (%v): removed namespace %s (%v)\n", s, r.ns, err)
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
		if err := rp.close(); err != nil {
			t.Errorf("clean up the router: %v", err)
		}
	})

	peer := r.link + "r"
	for _, args := range [][]string{
		{"netns", "add", r.ns},
		{"link", "add", r.link, "type", "veth", "peer", "name", peer, "netns", r.ns},
		{"addr", "add", r.node.String() + "/30", "dev", r.link},
		{"link", "set", r.link, "up"},
		{"-n", r.ns, "link", "set", "lo", "up"},
		{"-n", r.ns, "route", "add", "blackhole", routerPrefix.String()},
		{"-n", r.ns, "addr", "add", r.addr.String() + "/30", "dev", peer},
		{"-n", r.ns, "link", "set", peer, "up"},
	} {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}

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
 bgp log-neighbor-changes
 neighbor %s remote-as %d
 neighbor %s passive
 neighbor %s password %s
 neighbor %s timers connect 1
 address-family ipv4 unicast
  network %s
 exit-address-family
`, routerASN, r.addr, r.node, nodeASN, r.node, r.node, md5Secret, r.node, routerPrefix))
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

// reapScript is the reaper: it collects the daemons' names and process ids
// from its stdin and, when stdin closes (the test process closed it, or
// ended however it ended, even by SIGKILL or a test timeout), stops them
// (SIGTERM, SIGKILL after 5 s), deletes the namespace (which takes the veth
// pair with it) and removes the directory and FRR's per-process crash-log
// directories. It is the only cleanup path: the daemons drop to the frr
// user, which clears a parent-death signal, so nothing else would stop them
// if the test process died.
const reapScript = `ns=$1 link=$2 dir=$3 pids= names=
while read -r name pid; do pids="$pids $pid"; names="$names /var/tmp/frr/$name.$pid"; done
# A process id counts only while it is still this router's daemon (its
# command line names the directory), never a later process given the id.
mine() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$dir"; }
signal() { for p in $pids; do mine "$p" && kill "-$1" "$p" 2>/dev/null; done; return 0; }
alive() { for p in $pids; do mine "$p" && return 0; done; return 1; }
signal TERM
i=0
while alive && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
signal KILL
ip netns del "$ns" 2>/dev/null
ip link del "$link" 2>/dev/null
rm -rf "$dir" $names
exit 0`

type reaper struct {
	cmd  *exec.Cmd
	in   *os.File // the reaper's stdin
	once sync.Once
	err  error
}

func startReaper(ns, link, dir string) (*reaper, error) {
	rd, wr, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("sh", "-c", reapScript, "reaper", ns, link, dir)
	cmd.Stdin = rd
	// Its own process group: Ctrl-C's SIGINT to the test's group must not
	// kill it before it has cleaned up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		rd.Close()
		wr.Close()
		return nil, fmt.Errorf("start the reaper: %w", err)
	}
	rd.Close()
	return &reaper{cmd: cmd, in: wr}, nil
}

// add tells the reaper about a daemon.
func (rp *reaper) add(name string, pid int) error {
	_, err := fmt.Fprintf(rp.in, "%s %d\n", name, pid)
	return err
}

// close has the reaper clean up and waits for it.
func (rp *reaper) close() error {
	rp.once.Do(func() {
		rp.in.Close()
		if err := rp.cmd.Wait(); err != nil {
			rp.err = fmt.Errorf("reaper: %w", err)
		}
	})
	return rp.err
}

// daemon starts one FRR daemon in the namespace, in the foreground (`ip
// netns exec` execs it, so its process id is the daemon's), and hands it to
// the reaper.
func (r *frrRouter) daemon(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", r.ns, filepath.Join(frrDir, name)}, args...)...)
	out, err := os.Create(filepath.Join(r.dir, name+".out"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); out.Close() }() // reaps it
	if err := r.reaper.add(name, cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("hand %s to the reaper: %v", name, err)
	}
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
		UpdatesRecv       int `json:"updatesRecv"`
		NotificationsRecv int `json:"notificationsRecv"`
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
