package controller

import (
	"fmt"
	"os"
	"strings"

	"github.com/go-logr/logr"

	"zerodrop.dev/zerodrop/internal/metrics"
)

// tcpMigrateReqPath is the node's sysctl net.ipv4.tcp_migrate_req (Linux
// 5.14+), per network namespace: a data-plane replica has the node's.
const tcpMigrateReqPath = "/proc/sys/net/ipv4/tcp_migrate_req"

// migrateReq reads the sysctl's file content (or its read error) as the
// gauge's value (1, 0, or -1 when it cannot be read) and what the log
// says of it.
func migrateReq(data []byte, err error) (float64, string) {
	if err != nil {
		return -1, fmt.Sprintf("net.ipv4.tcp_migrate_req cannot be read (%v; Linux 5.14+ has it): when this replica's HAProxy stops softly at an update, the connections its listeners have queued but not yet accepted are reset", err)
	}
	switch v := strings.TrimSpace(string(data)); v {
	case "1":
		return 1, "net.ipv4.tcp_migrate_req=1: when this replica's HAProxy stops softly at an update, the connections its listeners have queued move to the new pod's listeners of the same ports"
	case "0":
		return 0, "net.ipv4.tcp_migrate_req=0: when this replica's HAProxy stops softly at an update, the connections its listeners have queued but not yet accepted are reset; set it to 1 on the node (chart README, node prerequisites)"
	default:
		return -1, fmt.Sprintf("net.ipv4.tcp_migrate_req reads %q, neither 0 nor 1", v)
	}
}

// reportTCPMigrateReq reads the node's net.ipv4.tcp_migrate_req once, at a
// data-plane replica's start, into the gauge and a log line: a soft stop's
// hand-over to the node's next pod resets the queued connections without
// it.
func reportTCPMigrateReq(m *metrics.Metrics, log logr.Logger) {
	v, msg := migrateReq(os.ReadFile(tcpMigrateReqPath))
	if m != nil {
		m.TCPMigrateReq.Set(v)
	}
	log.Info(msg, "sysctl", "net.ipv4.tcp_migrate_req", "value", v)
}
