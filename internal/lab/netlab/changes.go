package netlab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// What a part of the lab changes in a namespace it did not create (the
// load-balancer host's, for an emulated cloud's data plane), recorded so
// that its Close puts back exactly that: sysctls with their old values,
// and /32 addresses on lo it added.

// Sysctl is one sysctl: its key, a path under /proc/sys
// (net/ipv4/ip_forward), and the value to write.
type Sysctl struct{ Key, Value string }

// SysctlChanges are sysctls set in a namespace with the values they had
// before; Restore writes those back.
type SysctlChanges struct {
	ns  *Netns
	old [][2]string // path, old value, in the order set
}

// ChangeSysctls writes each sysctl inside the namespace, in order,
// remembering its old value. On an error the ones already written are in
// the returned changes, for Restore.
func (n *Netns) ChangeSysctls(set []Sysctl) (*SysctlChanges, error) {
	c := &SysctlChanges{ns: n}
	err := n.Do(func() error {
		for _, s := range set {
			path := filepath.Join("/proc/sys", s.Key)
			old, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("read %s: %w", path, err)
			}
			if err := os.WriteFile(path, []byte(s.Value), 0o644); err != nil {
				return fmt.Errorf("write %s: %w", path, err)
			}
			c.old = append(c.old, [2]string{path, strings.TrimSpace(string(old))})
		}
		return nil
	})
	return c, err
}

// Restore puts back every sysctl ChangeSysctls wrote, last first, each
// even when another fails. Nil-safe; a second call does nothing.
func (c *SysctlChanges) Restore() error {
	if c == nil || len(c.old) == 0 {
		return nil
	}
	err := c.ns.Do(func() error {
		var errs []error
		for _, s := range slices.Backward(c.old) {
			if err := os.WriteFile(s[0], []byte(s[1]), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("restore %s: %w", s[0], err))
			}
		}
		return errors.Join(errs...)
	})
	c.old = nil
	return err
}

// LoAddrs are the /32 addresses one owner keeps on a namespace's lo: the
// namespace then answers ARP for them on its other links (a frontend
// address). Only the addresses it added are ever removed.
type LoAddrs struct {
	ns   *Netns
	have map[netip.Addr]bool
}

// NewLoAddrs returns an owner of addresses on the namespace's lo, holding
// none.
func (n *Netns) NewLoAddrs() *LoAddrs { return &LoAddrs{ns: n, have: map[netip.Addr]bool{}} }

// Sync makes the owner's addresses on lo exactly want (nil: removes them
// all), each change tried even when another fails.
func (l *LoAddrs) Sync(ctx context.Context, want []netip.Addr) error {
	var errs []error
	for a := range l.have {
		if !slices.Contains(want, a) {
			if err := ip(ctx, "-n", l.ns.Name, "addr", "del", a.String()+"/32", "dev", "lo"); err != nil {
				errs = append(errs, fmt.Errorf("netns %s: %w", l.ns.Name, err))
				continue
			}
			delete(l.have, a)
		}
	}
	for _, a := range want {
		if l.have[a] {
			continue
		}
		if err := ip(ctx, "-n", l.ns.Name, "addr", "add", a.String()+"/32", "dev", "lo"); err != nil {
			errs = append(errs, fmt.Errorf("netns %s: %w", l.ns.Name, err))
			continue
		}
		l.have[a] = true
	}
	return errors.Join(errs...)
}

// NFT runs an nft script inside the namespace as one transaction. The
// script goes through a temporary file: a ruleset can outgrow an argument.
func (n *Netns) NFT(ctx context.Context, script string) error {
	f, err := os.CreateTemp("", "netlab-*.nft")
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
	if err := n.Run(ctx, "nft", "-f", f.Name()); err != nil {
		return fmt.Errorf("nft: %w", err)
	}
	return nil
}

// DeleteConntrack deletes the namespace's IPv4 conntrack entries filter
// matches and returns how many: an emulated load balancer forgets a flow it
// reset, which nft's reject does not make conntrack do.
func (n *Netns) DeleteConntrack(filter netlink.CustomConntrackFilter) (uint, error) {
	var deleted uint
	err := n.Do(func() error {
		h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
		if err != nil {
			return err
		}
		defer h.Close()
		deleted, err = h.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, filter)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("netns %s: delete conntrack entries: %w", n.Name, err)
	}
	return deleted, nil
}
