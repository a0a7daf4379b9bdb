package haproxy

import (
	"strings"
	"testing"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/testnet"
)

// TestVanishedBackendRedispatched: a backend that drops SYNs while HAProxy
// still has it active (nobody drained it, no health check has failed yet)
// costs a connection one connect timeout and a retry on another backend,
// not a failed connection.
func TestVanishedBackendRedispatched(t *testing.T) {
	dir := t.TempDir()
	var c counter
	p := startOwned(t, dir, &c)
	good := startBackends(t, 1, "127.0.3")[0]
	const silentAddr = "127.0.3.9"
	silent := model.Backend{Address: silentAddr, Port: int32(testnet.SilentPort(t, silentAddr)), Weight: model.DefaultWeight, State: model.Active}
	const key, lbAddr = "default/vanished", "127.0.0.53"
	port := freePort(t, lbAddr)
	l := listenerOf(key, "tcp-80", lbAddr, port, nil)
	l.Backends = []model.Backend{good.backend(), silent}
	// Checks slow enough that the silent backend stays UP for the test: it
	// is the data plane's own retry that is tested, not the health check.
	l.Probe = model.Probe{Kind: model.ProbeTCP, IntervalMillis: 60000, Rise: 1, Fall: 3}
	applyDiff(t, p, &model.LoadBalancer{Key: key, Listeners: []model.Listener{l}})
	// Round robin sends every other connection to the silent backend first.
	var failed []string
	for i := 0; i < 6; i++ {
		body, err := get(lbAddr, port)
		switch {
		case err != nil:
			failed = append(failed, err.Error())
		case body != good.id():
			failed = append(failed, "answered by "+body)
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of 6 connections failed with a silent backend active: %s", len(failed), strings.Join(failed, "; "))
	}
	// And HAProxy did send to the silent backend and redispatch: otherwise
	// the test proved nothing.
	text, err := p.read(testContext(t), "show-stat", "show stat")
	if err != nil {
		t.Fatal(err)
	}
	if n := statColumn(t, text, proxyName(key, l.Name), serverName(silent.Address, silent.Port), "wredis"); n == "" || n == "0" {
		t.Fatalf("the silent backend's redispatches (wredis) = %q: no connection was sent to it", n)
	}
}

// statColumn is one column of one server's `show stat` row.
func statColumn(t *testing.T, text, proxy, server, column string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	header := strings.Split(strings.TrimPrefix(lines[0], "# "), ",")
	col := -1
	for i, h := range header {
		if h == column {
			col = i
		}
	}
	if col < 0 {
		t.Fatalf("show stat has no %s column: %q", column, lines[0])
	}
	for _, line := range lines[1:] {
		f := strings.Split(line, ",")
		if len(f) > col && f[0] == proxy && f[1] == server {
			return f[col]
		}
	}
	t.Fatalf("show stat has no row for %s/%s", proxy, server)
	return ""
}
