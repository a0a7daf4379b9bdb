package azuredp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// What the data plane changes in its namespace besides the nftables tables:
// frontend addresses on lo, and three sysctls. Each change is undone by
// Close; nothing outside the namespace is touched.

// sysctls the data plane sets, and why.
var sysctls = []netlab.Sysctl{
	// Rules without floating IP are DNATed and forwarded by the IP stack.
	{Key: "net/ipv4/ip_forward", Value: "1"},
	// A DNATed packet leaves by the interface it came in on; an ICMP
	// redirect would tell the backend to answer the client directly,
	// around the reverse translation. send_redirects is on when either the
	// "all" or the interface's value is: both go off.
	{Key: "net/ipv4/conf/all/send_redirects", Value: "0"},
	{Key: "net/ipv4/conf/" + device + "/send_redirects", Value: "0"},
}

// ip runs `ip -n NS args…` and returns its output.
func (d *DataPlane) ip(ctx context.Context, args ...string) ([]byte, error) {
	out, err := supervisor.Output(ctx, supervisor.Command{Name: "ip", Args: append([]string{"-n", d.ns.Name}, args...)})
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", d.ns.Name, err)
	}
	return out, nil
}

// nextHop is where a floating-IP packet for addr goes: addr itself when it
// is on the device's link, else the gateway the namespace routes addr
// through (a pod behind its node).
func (d *DataPlane) nextHop(ctx context.Context, addr netip.Addr) (netip.Addr, error) {
	out, err := d.ip(ctx, "-j", "route", "get", addr.String())
	if err != nil {
		return netip.Addr{}, err
	}
	var routes []struct {
		Gateway string `json:"gateway"`
		Dev     string `json:"dev"`
	}
	if err := json.Unmarshal(out, &routes); err != nil || len(routes) == 0 {
		return netip.Addr{}, fmt.Errorf("route to %s in netns %s: %q", addr, d.ns.Name, out)
	}
	if routes[0].Dev != device {
		return netip.Addr{}, fmt.Errorf("route to %s in netns %s leaves by %s, not %s", addr, d.ns.Name, routes[0].Dev, device)
	}
	if routes[0].Gateway == "" {
		return addr, nil
	}
	return netip.ParseAddr(routes[0].Gateway)
}
