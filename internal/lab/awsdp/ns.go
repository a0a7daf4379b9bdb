package awsdp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"zerodrop.dev/zerodrop/internal/supervisor"
)

// What the data plane changes in its namespace besides its nftables
// table: frontend addresses on lo, and five sysctls. Each change is undone
// by Close; nothing outside the namespace is touched.

// sysctls the data plane sets, and why; the idle timeout's is added by
// New.
var sysctls = []struct{ key, value string }{
	// Connections are DNATed and forwarded by the IP stack.
	{"net/ipv4/ip_forward", "1"},
	// A DNATed packet leaves by the interface it came in on; an ICMP
	// redirect would tell the target to answer the client directly,
	// around the reverse translation. Off in "all" and the interface.
	{"net/ipv4/conf/all/send_redirects", "0"},
	{"net/ipv4/conf/" + device + "/send_redirects", "0"},
	// An NLB does not track TCP windows; conntrack's window checks would
	// mark a late segment invalid and drop it.
	{"net/netfilter/nf_conntrack_tcp_be_liberal", "1"},
	// A SYN the target never answers (kube-proxy drops it for a Local
	// Service with no ready pod on the node) leaves a SYN_SENT entry,
	// which conntrack keeps 120 s by default, each retransmission
	// renewing it. The lab's one client opens hundreds of connections a
	// second and reuses a source port within that time: its new
	// connection matched the old entry, went to the old target again
	// and renewed it, so a node out of service kept failing requests
	// long after the data plane stopped choosing it. Many clients do not
	// reuse one 4-tuple that fast; a few seconds past the client's
	// dial timeout (2 s) keeps a retransmitted SYN on its target.
	{"net/netfilter/nf_conntrack_tcp_timeout_syn_sent", "5"},
}

// idleSysctl is conntrack's timeout of an established TCP connection in
// the namespace: the NLB's idle timeout.
const idleSysctl = "net/netfilter/nf_conntrack_tcp_timeout_established"

// nft runs an nft script inside the namespace as one transaction, through
// a temporary file: a ruleset can outgrow an argument.
func (d *DataPlane) nft(ctx context.Context, script string) error {
	f, err := os.CreateTemp("", "awsdp-*.nft")
	if err != nil {
		return fmt.Errorf("nft script: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(script); err != nil {
		f.Close()
		return fmt.Errorf("nft script: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("nft script: %w", err)
	}
	if err := d.ns.Run(ctx, "nft", "-f", f.Name()); err != nil {
		return fmt.Errorf("nft: %w", err)
	}
	return nil
}

// ip runs `ip -n NS args…`.
func (d *DataPlane) ip(ctx context.Context, args ...string) error {
	if _, err := supervisor.Output(ctx, supervisor.Command{Name: "ip", Args: append([]string{"-n", d.ns.Name}, args...)}); err != nil {
		return fmt.Errorf("netns %s: %w", d.ns.Name, err)
	}
	return nil
}

// setSysctls sets the data plane's sysctls, remembering each old value
// (restoreSysctls puts them back).
func (d *DataPlane) setSysctls() error {
	all := append(slices.Clone(sysctls), struct{ key, value string }{idleSysctl, strconv.Itoa(int(d.cfg.IdleTimeout.Seconds()))})
	return d.ns.Do(func() error {
		for _, s := range all {
			path := filepath.Join("/proc/sys", s.key)
			old, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("read %s: %w", path, err)
			}
			if err := os.WriteFile(path, []byte(s.value), 0o644); err != nil {
				return fmt.Errorf("write %s: %w", path, err)
			}
			d.oldSysctls = append(d.oldSysctls, [2]string{path, strings.TrimSpace(string(old))})
		}
		return nil
	})
}

// restoreSysctls puts back every sysctl setSysctls changed, last first.
func (d *DataPlane) restoreSysctls() error {
	if len(d.oldSysctls) == 0 {
		return nil
	}
	err := d.ns.Do(func() error {
		var errs []error
		for _, s := range slices.Backward(d.oldSysctls) {
			if err := os.WriteFile(s[0], []byte(s[1]), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("restore %s: %w", s[0], err))
			}
		}
		return errors.Join(errs...)
	})
	d.oldSysctls = nil
	return err
}

// syncAddresses makes the frontend addresses on lo exactly want (as
// /32s): the namespace answers ARP for them on its device, so clients on
// the fabric reach them. Only addresses the data plane added are removed.
func (d *DataPlane) syncAddresses(ctx context.Context, want []netip.Addr) error {
	var errs []error
	for a := range d.addrs {
		if !slices.Contains(want, a) {
			if err := d.ip(ctx, "addr", "del", a.String()+"/32", "dev", "lo"); err != nil {
				errs = append(errs, err)
				continue
			}
			delete(d.addrs, a)
		}
	}
	for _, a := range want {
		if d.addrs[a] {
			continue
		}
		if err := d.ip(ctx, "addr", "add", a.String()+"/32", "dev", "lo"); err != nil {
			errs = append(errs, err)
			continue
		}
		d.addrs[a] = true
	}
	return errors.Join(errs...)
}
