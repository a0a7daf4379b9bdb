package main

// The old-workers phase (-reloads R, -websockets K; data-plane role): how
// much memory HAProxy holds when long-lived connections (WebSockets) keep
// old workers alive across reloads, each with a whole configuration, and
// what the old-worker bound (--haproxy-max-old-workers, HAProxy's
// mworker-max-reloads; --haproxy-hard-stop-after) leaves.
//
// R+1 Services beyond the -n measured ones are created one at a time while
// a data-plane replica runs: each is Service churn that reloads HAProxy,
// and each has endpoints that listen and hold every connection (the -n
// Services' endpoints close theirs at once, if they listen at all). After
// each reload K connections are opened through the newest such Service's
// frontend, so every worker the next reload makes old holds K of them. A
// reading after each reload gives each HAProxy process's PSS (the Pss line
// of /proc/PID/smaps_rollup: shared pages split between the processes
// sharing them, so the sum is what the container's memory counts), the
// connections each worker has (`@!PID show info` on the master CLI) and how
// many of the opened ones are still alive.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

var (
	reloadsFlag    = flag.Int("reloads", 0, "with -role data-plane: after the restart, force this many HAProxy reloads (Service churn: a new Service each) while -websockets connections per worker hold the old workers, and report HAProxy's memory (PSS) per process after each; 0: no such phase")
	websocketsFlag = flag.Int("websockets", 20, "with -reloads: long-lived connections opened through a frontend after each reload, held by the worker that serves then")
	holdFlag       = flag.Duration("hold", 10*time.Second, "with -reloads: how long the connections are held after the last reload before the last reading (longer than --haproxy-hard-stop-after, if given after --, to see it apply)")
)

// checkOldWorkerFlags rejects -reloads where it cannot run.
func checkOldWorkerFlags() error {
	if *reloadsFlag < 0 || *websocketsFlag < 1 {
		return fmt.Errorf("-reloads %d, -websockets %d: want at least 0 and 1", *reloadsFlag, *websocketsFlag)
	}
	if *reloadsFlag > 0 && *role != "data-plane" {
		return errors.New("-reloads needs -role data-plane: HAProxy is then the chart's haproxy container's")
	}
	return nil
}

// oldWorkersPhase runs the phase with a new controller process (args, as
// the earlier phases ran it) on the HAProxy of hdir.
func oldWorkersPhase(ctx context.Context, c client.Client, bin string, args []string, kubeconfig, work, hdir, readyURL string) error {
	base := *services
	hold, err := listenHeld(base, *reloadsFlag+1)
	if err != nil {
		return err
	}
	defer hold.close()
	p, err := startController(bin, args, kubeconfig, filepath.Join(work, "oldworkers.log"))
	if err != nil {
		return err
	}
	defer p.stop()
	if _, err := awaitReady(p, readyURL); err != nil {
		return err
	}
	master := filepath.Join(hdir, "master.sock")
	fmt.Printf("\nold workers: a Service created, HAProxy reloaded, %d long-lived connections opened through it; then %d times more; held %s after the last; controller flags: %s\n",
		*websocketsFlag, *reloadsFlag, *holdFlag, oldWorkerFlags(args))
	fmt.Println("| after | HAProxy reloads | old workers | master PSS | current worker PSS (connections) | old workers' PSS (connections) | HAProxy PSS | connections alive / opened |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	var conns []net.Conn
	defer func() {
		for _, cn := range conns {
			_ = cn.Close()
		}
	}()
	report := func(what string) error {
		r, err := readProcs(ctx, master)
		if err != nil {
			return err
		}
		fmt.Printf("| %s | %s |\n", what, r.row(alive(conns), len(conns)))
		return nil
	}
	first, err := readProcs(ctx, master)
	if err != nil {
		return err
	}
	peak := samplePeak(first.master.pid)
	defer peak.stop()
	if err := report("ready, no held connection"); err != nil {
		return err
	}
	for r := 0; r <= *reloadsFlag; r++ {
		i := base + r
		if err := churn(ctx, c, master, i); err != nil {
			return fmt.Errorf("reload %d: %w", r+1, err)
		}
		if r > 0 {
			if err := report(fmt.Sprintf("reload %d", r)); err != nil {
				return err
			}
		}
		opened, err := openHeld(address(i), *websocketsFlag)
		conns = append(conns, opened...)
		if err != nil {
			return fmt.Errorf("connections through %s: %w", name(i), err)
		}
	}
	time.Sleep(*holdFlag)
	if err := report(fmt.Sprintf("held %s more", *holdFlag)); err != nil {
		return err
	}
	fmt.Printf("HAProxy's peak PSS over the phase (master and workers, sampled every 100 ms, reloads included): %s\n", mib1(peak.stop()))
	return nil
}

// peakSampler keeps the highest sum of PSS of HAProxy's master and its
// haproxy children, read from /proc every 100 ms: during a reload the
// master (re-executing, its CLI silent) parses the new configuration while
// every worker still holds its own, the moment the readings after each
// reload miss.
type peakSampler struct {
	done chan struct{}
	wg   sync.WaitGroup
	max  uint64
}

func samplePeak(master int) *peakSampler {
	ps := &peakSampler{done: make(chan struct{})}
	ps.wg.Add(1)
	go func() {
		defer ps.wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if sum := haproxyTreePSS(master); sum > ps.max {
				ps.max = sum
			}
			select {
			case <-ps.done:
				return
			case <-t.C:
			}
		}
	}()
	return ps
}

// stop ends the sampling (once; later calls return the same) and returns
// the peak.
func (ps *peakSampler) stop() uint64 {
	select {
	case <-ps.done:
	default:
		close(ps.done)
	}
	ps.wg.Wait()
	return ps.max
}

// haproxyTreePSS sums the PSS of master and of its children named haproxy.
func haproxyTreePSS(master int) uint64 {
	sum := pss(master)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", master, master))
	if err != nil {
		return sum
	}
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "haproxy" {
			sum += pss(pid)
		}
	}
	return sum
}

// oldWorkerFlags are the controller's old-worker flags as given (none: the
// defaults).
func oldWorkerFlags(args []string) string {
	var out []string
	for _, a := range args {
		if strings.HasPrefix(a, "--haproxy-max-old-workers") || strings.HasPrefix(a, "--haproxy-hard-stop-after") {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return "the defaults"
	}
	return strings.Join(out, " ")
}

// churn creates Service i (with its endpoints and its status address) and
// waits until HAProxy has reloaded with a new worker for it.
func churn(ctx context.Context, c client.Client, master string, i int) error {
	before, err := readProcs(ctx, master)
	if err != nil {
		return err
	}
	if err := createService(ctx, c, i, firstEndpoints(i)); err != nil {
		return err
	}
	if err := setAddress(ctx, c, i); err != nil {
		return err
	}
	deadline := time.Now().Add(*timeout)
	for {
		now, err := readProcs(ctx, master)
		if err == nil && now.reloads > before.reloads && now.current.pid != before.current.pid {
			// The old worker has been told to stop accepting once the
			// new one serves: leave it a moment, so that the connections
			// opened next are the new worker's.
			time.Sleep(time.Second)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no reload for %s within %s (last: %v)", name(i), *timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// heldReply is what a holding endpoint sends first: a client that reads it
// reached an endpoint through the frontend.
const heldReply = "procmem held\n"

// heldEndpoints listen at the endpoints of Services from..from+count-1 and
// hold every connection open until the client (or HAProxy) closes it.
type heldEndpoints struct {
	lns []net.Listener
	wg  sync.WaitGroup
	mu  sync.Mutex
	cs  []net.Conn
}

func listenHeld(from, count int) (*heldEndpoints, error) {
	h := &heldEndpoints{}
	for k := from * *endpoints; k < (from+count)**endpoints; k++ {
		// Service i's endpoints (firstEndpoints), under --backend-address-map.
		ln, err := net.Listen("tcp", net.JoinHostPort(endpointLoopback(k), "8080"))
		if err != nil {
			h.close()
			return nil, fmt.Errorf("holding endpoint %d: %w", k, err)
		}
		h.lns = append(h.lns, ln)
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			for {
				cn, err := ln.Accept()
				if err != nil {
					return
				}
				h.mu.Lock()
				h.cs = append(h.cs, cn)
				h.mu.Unlock()
				go func() {
					_, _ = io.WriteString(cn, heldReply)
					_, _ = io.Copy(io.Discard, cn) // until the other side closes
					_ = cn.Close()
				}()
			}
		}()
	}
	return h, nil
}

func (h *heldEndpoints) close() {
	for _, ln := range h.lns {
		_ = ln.Close()
	}
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, cn := range h.cs {
		_ = cn.Close()
	}
}

// openHeld opens k connections to addr:80 that each read heldReply (they
// reached a holding endpoint), retrying for a minute while the new
// frontend's servers are not yet up.
func openHeld(addr string, k int) ([]net.Conn, error) {
	var out []net.Conn
	deadline := time.Now().Add(time.Minute)
	for len(out) < k {
		cn, err := net.DialTimeout("tcp", net.JoinHostPort(addr, "80"), 2*time.Second)
		if err == nil {
			_ = cn.SetReadDeadline(time.Now().Add(3 * time.Second))
			buf := make([]byte, len(heldReply))
			if _, err = io.ReadFull(cn, buf); err == nil && string(buf) != heldReply {
				err = fmt.Errorf("answered %q", buf)
			}
			if err == nil {
				_ = cn.SetReadDeadline(time.Time{})
				out = append(out, cn)
				continue
			}
			_ = cn.Close()
		}
		if time.Now().After(deadline) {
			return out, fmt.Errorf("%d of %d opened within a minute: %w", len(out), k, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return out, nil
}

// alive counts the connections the other side has not closed: a read that
// times out finds the connection open, one that returns finds it closed.
func alive(conns []net.Conn) int {
	n := 0
	one := make([]byte, 1)
	for _, cn := range conns {
		_ = cn.SetReadDeadline(time.Now().Add(time.Millisecond))
		_, err := cn.Read(one)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			n++
		}
	}
	return n
}

// haproxyProc is one HAProxy process from `show proc`.
type haproxyProc struct {
	pid, conns int
	pss        uint64
}

// procsReading is HAProxy's processes at one moment.
type procsReading struct {
	reloads int
	master  haproxyProc
	current haproxyProc
	old     []haproxyProc
}

func (r procsReading) row(alive, opened int) string {
	total := r.master.pss + r.current.pss
	var olds []string
	for _, o := range r.old {
		total += o.pss
		olds = append(olds, fmt.Sprintf("%s (%s)", mib1(o.pss), connsText(o.conns)))
	}
	if len(olds) == 0 {
		olds = []string{"none"}
	}
	return fmt.Sprintf("%d | %d | %s | %s (%s) | %s | %s | %d / %d", r.reloads, len(r.old), mib1(r.master.pss),
		mib1(r.current.pss), connsText(r.current.conns), strings.Join(olds, ", "), mib1(total), alive, opened)
}

func mib1(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func connsText(n int) string {
	if n < 0 {
		return "n/a"
	}
	return strconv.Itoa(n)
}

// readProcs reads HAProxy's processes through the master socket (the
// provider's reader, haproxy.MasterProcs), then each process's PSS and
// each worker's current connections.
func readProcs(ctx context.Context, master string) (procsReading, error) {
	mpid, reloads, workers, olds, err := haproxy.MasterProcs(ctx, master)
	if err != nil {
		return procsReading{}, err
	}
	if len(workers) == 0 {
		return procsReading{}, fmt.Errorf("master %d has no current worker", mpid)
	}
	r := procsReading{reloads: reloads, master: haproxyProc{pid: mpid, pss: pss(mpid), conns: -1}}
	r.current = haproxyProc{pid: workers[0], pss: pss(workers[0]), conns: workerConns(ctx, master, workers[0])}
	for _, pid := range olds {
		r.old = append(r.old, haproxyProc{pid: pid, pss: pss(pid), conns: workerConns(ctx, master, pid)})
	}
	return r, nil
}

// workerConns is the current connections of worker pid (-1 when it does
// not answer).
func workerConns(ctx context.Context, master string, pid int) int {
	n, err := haproxy.WorkerConns(ctx, master, pid)
	if err != nil {
		return -1
	}
	return n
}

// pss is the process's proportional set size in bytes (0 when unreadable).
func pss(pid int) uint64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
