package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// Router is the router in front of a data plane installed from the chart
// (--router): the lab's stand-in (router.go), or FRR's bgpd and zebra in
// the router's namespace, peering with the chart's speaker DaemonSet
// (`zerodrop speaker`, haproxy.bgp) on every load-balancer host.
type Router string

const (
	// RouterStandIn: the lab announces a host once its data-plane pod is
	// Ready (routes.go) into a resilient nexthop group it programs.
	RouterStandIn Router = "stand-in"
	// RouterFRRECMP: FRR, and zebra installs the multipath route:
	// hash-threshold ECMP, as most routers do (a member leaving can move
	// the flows of members that stay).
	RouterFRRECMP Router = "frr-ecmp"
	// RouterFRRResilient: FRR's bgpd does not install its routes (-n, no
	// kernel); the lab reads bgpd's table and programs a resilient
	// nexthop group per address (frr_fib.go), which FRR does not do for
	// BGP routes.
	RouterFRRResilient Router = "frr-resilient"
)

// Routers are the --router values.
var Routers = []Router{RouterStandIn, RouterFRRECMP, RouterFRRResilient}

// FRR: the router is FRR.
func (r Router) FRR() bool { return r == RouterFRRECMP || r == RouterFRRResilient }

// The lab's BGP numbers: the router's AS, and one AS for every data-plane
// node (the chart's haproxy.bgp.asn), so that the nodes' paths are equal
// and multipath takes them all (as-path multipath-relax is set too).
const (
	RouterASN = 64512
	NodeASN   = 64513
	// HoldTime is the chart's haproxy.bgp.holdTime in the lab: a node that
	// fails hard is withdrawn after it.
	HoldTime = 9 * time.Second
	// GracefulRestartTime is the chart's haproxy.bgp.gracefulRestartTime
	// (its default): the router keeps a restarting speaker's routes this
	// long.
	GracefulRestartTime = 120 * time.Second
	frrLibDir           = "/usr/lib/frr"
	// frrCrashDir is where every FRR daemon makes a directory of its own
	// (its name and process id), Debian's build's path.
	frrCrashDir = "/var/tmp/frr"
)

// SpeakerValues are the chart values (helm --set) that turn on the
// speaker DaemonSet, peering with the lab's FRR at routerIP, its
// candidates the Services of class.
func SpeakerValues(routerIP netip.Addr, class string) []string {
	return []string{
		"haproxy.bgp.enabled=true",
		fmt.Sprintf("haproxy.bgp.asn=%d", NodeASN),
		"haproxy.bgp.peers[0].address=" + routerIP.String(),
		fmt.Sprintf("haproxy.bgp.peers[0].asn=%d", RouterASN),
		"haproxy.bgp.holdTime=" + HoldTime.String(),
		"haproxy.bgp.gracefulRestartTime=" + GracefulRestartTime.String(),
		"haproxy.bgp.extraArgs[0]=--load-balancer-class=" + class,
	}
}

// FRR is the lab's FRR router: zebra and bgpd in the router's namespace,
// with a configuration the lab writes in a directory of its own (the
// daemons drop to FRR's user, which must reach it; the system's FRR
// configuration and service are not used).
type FRR struct {
	Mode Router
	host *netlab.Host
	dir  string // the daemons' configuration, sockets and logs
	// labDir receives their logs at Close (the daemons, as FRR's user,
	// may not write there).
	labDir string
	peers  []netip.Addr // the load-balancer hosts, lbs[i] is peers[i]
	procs  []*netlab.Process
	logf   func(string, ...any)
}

// StartFRR starts zebra and bgpd in the lab's router namespace, one
// passive neighbor per load-balancer host (the speakers dial). Close stops
// them; the lab's network teardown would too.
func StartFRR(ctx context.Context, lab world.Lab, mode Router) (_ *FRR, err error) {
	if lab.Net.Router == nil {
		return nil, fmt.Errorf("--router %s: the lab has no router (it needs at least 2 data-plane replicas)", mode)
	}
	for _, bin := range []string{filepath.Join(frrLibDir, "zebra"), filepath.Join(frrLibDir, "bgpd")} {
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("--router %s: FRR is not installed (%w): make frr installs it", mode, err)
		}
	}
	if _, err := exec.LookPath("vtysh"); err != nil {
		return nil, fmt.Errorf("--router %s: %w (make frr installs it)", mode, err)
	}
	// Not under the lab's directory: a test's is closed to FRR's user.
	dir, err := os.MkdirTemp("", "zerodrop-lab-frr-")
	if err != nil {
		return nil, err
	}
	f := &FRR{Mode: mode, host: lab.Net.Router, dir: dir, labDir: lab.Dir, logf: lab.Logf}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	for _, h := range lab.Net.LBs {
		f.peers = append(f.peers, h.IP)
	}
	if err := f.writeConfig(); err != nil {
		return nil, err
	}
	common := []string{"-u", "frr", "-g", "frr", "-P", "0", "--vty_socket", dir, "-z", filepath.Join(dir, "zserv.api")}
	if err := f.daemon(lab, "zebra", append(common, "-f", filepath.Join(dir, "zebra.conf"), "-i", filepath.Join(dir, "zebra.pid"),
		"--log", "file:"+filepath.Join(dir, "zebra.log"))...); err != nil {
		return nil, err
	}
	if err := traffic.WaitFor(ctx, 20*time.Second, "zebra's socket", func() (bool, string) {
		_, err := os.Stat(filepath.Join(dir, "zserv.api"))
		return err == nil, "not there yet"
	}); err != nil {
		return nil, err
	}
	bgpd := append(common, "-f", filepath.Join(dir, "bgpd.conf"), "-i", filepath.Join(dir, "bgpd.pid"),
		"--log", "file:"+filepath.Join(dir, "bgpd.log"))
	if mode == RouterFRRResilient {
		// bgpd's routes stay out of the kernel (zebra still resolves
		// their next hops): the lab installs them as resilient groups.
		bgpd = append(bgpd, "--no_kernel")
	}
	if err := f.daemon(lab, "bgpd", bgpd...); err != nil {
		return nil, err
	}
	if err := traffic.WaitFor(ctx, 20*time.Second, "bgpd answering", func() (bool, string) {
		_, err := f.Sessions(ctx)
		return err == nil, fmt.Sprint(err)
	}); err != nil {
		return nil, err
	}
	lab.Logf("router: FRR (%s) in %s, AS %d, %d passive neighbors in AS %d", mode, f.host.Name, RouterASN, len(f.peers), NodeASN)
	return f, nil
}

// writeConfig writes zebra's, bgpd's and vtysh's configuration, owned by
// FRR's user.
func (f *FRR) writeConfig() error {
	frr, err := user.Lookup("frr")
	if err != nil {
		return fmt.Errorf("FRR's user: %w", err)
	}
	uid, _ := strconv.Atoi(frr.Uid)
	gid, _ := strconv.Atoi(frr.Gid)
	if err := os.Chown(f.dir, uid, gid); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "hostname lab-router\nrouter bgp %d\n bgp router-id %s\n", RouterASN, f.host.IP)
	// eBGP without a policy; the nodes' equal paths spread (maximum-paths,
	// and multipath-relax should the nodes' ASNs differ); graceful restart
	// in helper mode is FRR's default and what keeps a restarting
	// speaker's routes.
	b.WriteString(" no bgp ebgp-requires-policy\n no bgp network import-check\n bgp log-neighbor-changes\n bgp bestpath as-path multipath-relax\n")
	for _, p := range f.peers {
		// Passive: the speaker only dials. Nothing is sent to the nodes.
		fmt.Fprintf(&b, " neighbor %s remote-as %d\n neighbor %s passive\n", p, NodeASN, p)
	}
	b.WriteString(" address-family ipv4 unicast\n  maximum-paths 16\n")
	for _, p := range f.peers {
		fmt.Fprintf(&b, "  neighbor %s route-map lab-nothing out\n", p)
	}
	b.WriteString(" exit-address-family\nroute-map lab-nothing deny 10\n")
	for name, text := range map[string]string{"zebra.conf": "hostname lab-router\n", "vtysh.conf": "", "bgpd.conf": b.String()} {
		p := filepath.Join(f.dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			return err
		}
		if err := os.Chown(p, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// daemon starts one FRR daemon in the foreground in the router's
// namespace, as a lab process (stopped by Close or the lab's teardown).
func (f *FRR) daemon(lab world.Lab, name string, args ...string) error {
	out, err := os.Create(filepath.Join(lab.Dir, "frr-"+name+".out"))
	if err != nil {
		return err
	}
	defer out.Close()
	p, err := lab.Net.Net.Start(f.host.Netns, out, out, filepath.Join(frrLibDir, name), args...)
	if err != nil {
		return fmt.Errorf("router: start %s: %w", name, err)
	}
	f.procs = append(f.procs, p)
	return nil
}

// Close stops the daemons, copies their logs to the lab's directory, and
// removes their directory and FRR's per-process crash-log directories.
func (f *FRR) Close() {
	for _, p := range slices.Backward(f.procs) {
		pid := p.Pid()
		_ = p.Stop()
		// `ip netns exec` execs the daemon: its pid is the daemon's.
		for _, name := range []string{"zebra", "bgpd"} {
			_ = os.RemoveAll(filepath.Join(frrCrashDir, fmt.Sprintf("%s.%d", name, pid)))
		}
	}
	for _, name := range []string{"zebra.log", "bgpd.log"} {
		if b, err := os.ReadFile(filepath.Join(f.dir, name)); err == nil {
			_ = os.WriteFile(filepath.Join(f.labDir, "frr-"+name), b, 0o644)
		}
	}
	_ = os.RemoveAll(f.dir)
}

// VtyDir is the directory of the daemons' vty sockets (vtysh
// --vty_socket).
func (f *FRR) VtyDir() string { return f.dir }

// Host is the router's namespace.
func (f *FRR) Host() *netlab.Host { return f.host }

// vtysh runs a show command against bgpd and decodes its JSON.
func (f *FRR) vtysh(ctx context.Context, command string, v any) error {
	out, err := supervisor.Output(ctx, supervisor.Command{Name: "vtysh", Args: []string{"--vty_socket", f.dir, "--config_dir", f.dir, "-d", "bgpd", "-c", command}})
	if err != nil {
		return err
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("vtysh %q: parse %q: %w", command, out, err)
	}
	return nil
}

// Session is the router's view of its session with one node's speaker.
type Session struct {
	State       string `json:"bgpState"`
	Established int    `json:"connectionsEstablished"`
	Dropped     int    `json:"connectionsDropped"`
	LastReset   string `json:"lastResetDueTo"`
	Messages    struct {
		UpdatesRecv       int `json:"updatesRecv"`
		NotificationsRecv int `json:"notificationsRecv"`
	} `json:"messageStats"`
	GR struct {
		// EndOfRibRecv: the speaker's End-of-RIB came, by address family:
		// after a graceful restart, the router has then
		// dropped the stale paths the speaker did not announce again.
		EndOfRibRecv map[string]bool `json:"endOfRibRecv"`
	} `json:"gracefulRestartInfo"`
}

// Sessions are the router's sessions, by the node's address.
func (f *FRR) Sessions(ctx context.Context) (map[netip.Addr]Session, error) {
	var m map[string]json.RawMessage
	if err := f.vtysh(ctx, "show bgp neighbors json", &m); err != nil {
		return nil, err
	}
	out := map[netip.Addr]Session{}
	for k, raw := range m {
		a, err := netip.ParseAddr(k)
		if err != nil {
			continue
		}
		var s Session
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("neighbor %s: %w", k, err)
		}
		out[a] = s
	}
	return out, nil
}

// Established counts the sessions in state Established.
func Established(s map[netip.Addr]Session) int {
	n := 0
	for _, x := range s {
		if x.State == "Established" {
			n++
		}
	}
	return n
}

// RIB is bgpd's table: for each prefix, the next hops of its paths that
// bgpd selected (best and multipath), stale ones (a speaker restarting)
// included, sorted.
func (f *FRR) RIB(ctx context.Context) (map[netip.Prefix][]netip.Addr, error) {
	var v struct {
		Routes map[string][]struct {
			Valid bool `json:"valid"`
			// true in the table's JSON; an object in a prefix's.
			Bestpath  json.RawMessage `json:"bestpath"`
			Multipath bool            `json:"multipath"`
			Nexthops  []struct {
				IP string `json:"ip"`
			} `json:"nexthops"`
		} `json:"routes"`
	}
	if err := f.vtysh(ctx, "show bgp ipv4 unicast json", &v); err != nil {
		return nil, err
	}
	out := map[netip.Prefix][]netip.Addr{}
	for k, paths := range v.Routes {
		p, err := netip.ParsePrefix(k)
		if err != nil {
			continue
		}
		var hops []netip.Addr
		for _, path := range paths {
			best := len(path.Bestpath) > 0 && string(path.Bestpath) != "false" && string(path.Bestpath) != "null"
			if !path.Valid || !(best || path.Multipath) {
				continue
			}
			for _, nh := range path.Nexthops {
				if a, err := netip.ParseAddr(nh.IP); err == nil {
					hops = append(hops, a)
				}
			}
		}
		slices.SortFunc(hops, func(a, b netip.Addr) int { return a.Compare(b) })
		if hops = slices.Compact(hops); len(hops) > 0 {
			out[p] = hops
		}
	}
	return out, nil
}

// OpenFRR is the lab's FRR whose vty sockets are in vtyDir (VtyDir), to
// read its sessions and table from outside the lab (its tests).
func OpenFRR(vtyDir string) *FRR { return &FRR{dir: vtyDir} }
