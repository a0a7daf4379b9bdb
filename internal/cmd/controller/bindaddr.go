package controller

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// validateBindAddress checks a listener flag's HOST:PORT before anything is
// started: a value net.Listen would refuse must be a usage error naming the
// flag, not a listener failing at run time (a crash loop). The case it is
// written for is the chart's `$(HOST_IP):PORT` on an IPv6-primary node:
// `fd00::a:9092` is refused by Go with "too many colons" — IPv6 needs
// brackets, `[fd00::a]:9092`, and Go accepts brackets around an IPv4
// address too, so `[$(HOST_IP)]:PORT` works for both families.
// "" and "0" (disabled) pass.
func validateBindAddress(flag, addr string) error {
	if addr == "" || addr == "0" {
		return nil
	}
	const forms = "want HOST:PORT, [IPv6]:PORT (brackets around an IPv6 address, e.g. [fd00::a]:9092) or :PORT (every interface)"
	if !strings.Contains(addr, "[") && strings.Count(addr, ":") > 1 {
		// An IPv6 address and a port without brackets: Go refuses it with
		// "too many colons" — or, as in fd00::a:9092, it is itself an
		// IPv6 address without a port. Say which bracketed form was meant.
		i := strings.LastIndex(addr, ":")
		if a, err := netip.ParseAddr(addr[:i]); err == nil && a.Is6() && addr[i+1:] != "" {
			return fmt.Errorf("--%s %q: an IPv6 address needs brackets: [%s]:%s (%s)", flag, addr, addr[:i], addr[i+1:], forms)
		}
		return fmt.Errorf("--%s %q: an IPv6 address needs brackets; %s", flag, addr, forms)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--%s %q: %s: %w", flag, addr, forms, err)
	}
	if strings.HasPrefix(addr, "[]") {
		// `[$(HOST_IP)]` with an empty variable: Go would bind every
		// interface, which is exactly what the brackets were to avoid.
		return fmt.Errorf("--%s %q: empty brackets (an empty host address variable?); %s", flag, addr, forms)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("--%s %q: port %q is not a number from 0 to 65535", flag, addr, port)
	}
	if host == "" {
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" && !a.Is6() {
			return fmt.Errorf("--%s %q: a zone on an IPv4 address", flag, addr)
		}
		return nil
	}
	if !isHostName(host) {
		return fmt.Errorf("--%s %q: host %q is neither an IP address nor a host name (an unexpanded $(VAR)?); %s", flag, addr, host, forms)
	}
	return nil
}

// isHostName reports whether s is made of DNS name characters only.
func isHostName(s string) bool {
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
		default:
			return false
		}
	}
	return s != ""
}

// validateBindAddresses checks every listener flag of the command.
func (c *Config) validateBindAddresses() error {
	for _, f := range []struct{ flag, addr string }{
		{"metrics-bind-address", c.MetricsAddr},
		{"health-probe-bind-address", c.ProbeAddr},
		{"pprof-bind-address", c.PprofAddr},
		{"drain-bind-address", c.DrainAddr},
		{"state-bind-address", c.DataPlane.StateAddr},
	} {
		if err := validateBindAddress(f.flag, f.addr); err != nil {
			return err
		}
	}
	return nil
}
