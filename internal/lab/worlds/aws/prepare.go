package aws

import (
	"context"
	"fmt"

	"zerodrop.dev/zerodrop/internal/lab/world"
)

// returnTable is the nodes' routing table for answers to the client.
const returnTable = "101"

// Prepare routes the nodes' answers to the client through the
// load-balancer host: an NLB's instance targets see the client's own
// address (preserve_client_ip, on by default for instance targets), and
// awsdp DNATs the connection there, so its answers must pass it again to
// be translated back (on AWS the VPC's network does that). Made once per
// lab; the network's teardown removes the namespaces with them.
func (w *World) Prepare(ctx context.Context, lab world.Lab) error {
	net := lab.Net
	client := net.Client.IP.String() + "/32"
	for _, n := range net.Net.Nodes {
		for _, args := range [][]string{
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
