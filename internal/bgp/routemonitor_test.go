package bgp

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// routeEvents records the router's kernel route changes as `ip monitor`
// prints them, which catches a route deleted and re-added between two reads
// of the table.
type routeEvents struct {
	r     *frrRouter
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

// monitorRoutes starts recording; it returns once the monitor is known to
// see changes (a marker route was seen).
func (r *frrRouter) monitorRoutes(t *testing.T, ctx context.Context) *routeEvents {
	t.Helper()
	m := &routeEvents{r: r, done: make(chan struct{})}
	m.cmd = exec.Command("ip", "-n", r.ns, "monitor", "route")
	// ip keeps no credentials to drop, so it dies with the test process.
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("ip monitor: %v", err)
	}
	t.Cleanup(func() { _ = m.cmd.Process.Kill(); <-m.done })
	go func() {
		defer close(m.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			m.mu.Lock()
			m.lines = append(m.lines, sc.Text())
			m.mu.Unlock()
		}
		_ = m.cmd.Wait()
	}()
	m.mark(t, ctx, markerStart)
	return m
}

// Marker routes, inside routerPrefix (whose blackhole they refine).
var (
	markerStart = netip.MustParseAddr("198.51.100.253")
	markerStop  = netip.MustParseAddr("198.51.100.254")
)

// mark adds a marker route and waits until the monitor has printed it. The
// monitor may not listen yet when it starts, so the marker is deleted and
// added again until it shows.
func (m *routeEvents) mark(t *testing.T, ctx context.Context, marker netip.Addr) {
	t.Helper()
	dst := marker.String() + "/32"
	tries := 0
	m.r.waitFor(t, ctx, "the monitor to print "+dst, func() (bool, error) {
		if len(m.about(marker)) > 0 {
			return true, nil
		}
		if tries%10 == 0 { // every 200 ms
			_ = exec.CommandContext(ctx, "ip", "-n", m.r.ns, "route", "del", dst).Run()
			if out, err := exec.CommandContext(ctx, "ip", "-n", m.r.ns, "route", "add", "blackhole", dst).CombinedOutput(); err != nil {
				return false, fmt.Errorf("add marker %s: %w: %s", dst, err, out)
			}
		}
		tries++
		return false, nil
	})
}

// stop ends the recording once every change before it was printed, and
// returns the recorded changes (the markers left out).
func (m *routeEvents) stop(t *testing.T, ctx context.Context) []string {
	t.Helper()
	m.mark(t, ctx, markerStop)
	_ = m.cmd.Process.Kill()
	<-m.done
	_ = exec.Command("ip", "-n", m.r.ns, "route", "del", markerStart.String()+"/32").Run()
	_ = exec.Command("ip", "-n", m.r.ns, "route", "del", markerStop.String()+"/32").Run()
	var l []string
	for _, line := range m.lines {
		if !mentions(line, markerStart) && !mentions(line, markerStop) {
			l = append(l, line)
		}
	}
	return l
}

// about returns the recorded lines that name addr.
func (m *routeEvents) about(addr netip.Addr) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var l []string
	for _, line := range m.lines {
		if mentions(line, addr) {
			l = append(l, line)
		}
	}
	return l
}

func mentions(line string, addr netip.Addr) bool {
	return slices.Contains(strings.Fields(line), addr.String())
}
