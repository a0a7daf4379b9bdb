package azuredp

import (
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// With PoolFlowsReset, a flow whose backend left the pools is reset at its
// client's next packet by nft's reject, which conntrack does not track:
// the connection's entry would stay established for the idle timeout, and
// a client that reuses the 4-tuple within it (the lab's one client opens
// hundreds of connections a second) would have its new SYN answered by the
// same reset, "connection refused". No public source says what Azure does
// there (as for the reset itself, docs/azure-dataplane.md, "Not
// modelled"); the data plane assumes TCP's answer, a new connection. So
// the reject marks the entry (resetMark) and the data
// plane deletes the marked entries every forgetEvery. Entries not yet
// reset (an idle connection) stay, to be reset at their next packet.

// resetMark is the conntrack mark of a connection the data plane reset.
const resetMark = 0x7a0d

// forgetEvery is how often the reset connections' entries are deleted.
const forgetEvery = 250 * time.Millisecond

// markedFilter matches the entries of connections the data plane reset.
type markedFilter struct{}

func (markedFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	return flow.Mark == resetMark && flow.Forward.Protocol == unix.IPPROTO_TCP
}

// forgetReset deletes the entries of the connections the data plane reset.
func (d *DataPlane) forgetReset() error {
	n, err := d.ns.DeleteConntrack(markedFilter{})
	if err != nil {
		return fmt.Errorf("azuredp: forget the reset connections: %w", err)
	}
	if n > 0 {
		d.logf("azuredp: forgot %d reset connections", n)
	}
	return nil
}
