package azure

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// returnTable is the nodes' routing table for answers to the client of
// connections azuredp translated; directMark marks the connections a
// floating-IP rule delivered (addressed to a frontend), whose answers go
// straight to the client.
const (
	returnTable = "100"
	directMark  = "0x5a"
)

// Prepare routes the nodes' answers to the client through the
// load-balancer host, which must translate them back, when a rule without
// floating IP translated the connection (azuredp DNATs; on Azure the
// backend's host does it). A connection a floating-IP rule delivered
// unchanged (addressed to the frontend, which kube-proxy translates) is
// marked as it arrives and answered directly (Azure's direct server
// return): its answers leave kube-proxy's translation with the frontend's
// address, which the load-balancer host would drop as its own. The choice
// is made before routing, by the connection's mark, because kube-proxy
// gives an answer its frontend source only after routing. Made once per
// lab; the network's teardown removes the namespaces with them.
func (w *World) Prepare(ctx context.Context, lab world.Lab) error {
	net, dir := lab.Net, lab.Dir
	client := net.Client.IP.String() + "/32"
	ruleset := fmt.Sprintf(`table ip zerodrop_lab_azure {
	chain prerouting {
		type filter hook prerouting priority mangle; policy accept;
		ct state new ip daddr %s ct mark set %s
		ct direction reply ct mark %s meta mark set meta mark or %s
	}
}
`, cluster.FrontendNet, directMark, directMark, directMark)
	path := filepath.Join(dir, "azure-direct-return.nft")
	if err := os.WriteFile(path, []byte(ruleset), 0o644); err != nil {
		return err
	}
	for _, n := range net.Net.Nodes {
		if err := n.Run(ctx, "nft", "-f", path); err != nil {
			return fmt.Errorf("node %d: direct-return marks: %w", n.Index, err)
		}
		for _, args := range [][]string{
			{"rule", "add", "pref", "1000", "fwmark", directMark + "/" + directMark, "lookup", "main"},
			{"rule", "add", "pref", "1001", "to", client, "lookup", returnTable},
			{"route", "add", "default", "via", net.LB.IP.String(), "table", returnTable},
		} {
			if err := n.Run(ctx, "ip", args...); err != nil {
				return fmt.Errorf("node %d: return route: %w", n.Index, err)
			}
		}
	}
	return nil
}
