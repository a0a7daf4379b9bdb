package lab

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ChildEnv is set in the environment of the controller processes the lab
// starts by re-executing its own binary with `controller` arguments. A test
// binary, which has no `controller` subcommand, looks for it in TestMain.
const ChildEnv = "ZERODROP_LAB_CHILD"

// counters are a controller's provider figures, read from its metrics
// endpoint.
type counters struct{ writes, conflicts float64 }

func (c counters) add(o counters) counters {
	return counters{c.writes + o.writes, c.conflicts + o.conflicts}
}

func (c counters) sub(o counters) counters {
	return counters{c.writes - o.writes, c.conflicts - o.conflicts}
}

// ctrlProc is one `zerodrop controller` process that can be stopped and
// started again; its counters add up over its restarts. The metrics endpoint
// is scraped every 250 ms and just before each stop.
type ctrlProc struct {
	name        string
	exe         string
	args        []string
	logPath     string
	metricsAddr string
	drainAddr   string // empty: no drain endpoint

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	cancel context.CancelFunc // the scraper
	cur    counters           // of the running process
	total  counters           // of the processes that ended
	leader bool

	lingering sync.WaitGroup // replaced processes still finishing
}

// start runs the process and waits for its metrics endpoint.
func (p *ctrlProc) start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("controller %s already running", p.name)
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "\n=== lab: start %s %s\n", p.name, strings.Join(p.args, " "))
	cmd := exec.Command(p.exe, append([]string{"controller"}, p.args...)...)
	cmd.Env = append(os.Environ(), ChildEnv+"=controller")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start controller %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done = cmd, done
	deadline := time.Now().Add(60 * time.Second)
	for {
		if c, leader, err := p.fetch(); err == nil {
			p.cur, p.leader = c, leader
			break
		}
		select {
		case <-done:
			p.cmd = nil
			return fmt.Errorf("controller %s exited at start (see %s)", p.name, p.logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("controller %s: metrics endpoint %s not up after 60s", p.name, p.metricsAddr)
		}
	}
	sctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go p.scrapeLoop(sctx, cmd)
	return nil
}

func (p *ctrlProc) scrapeLoop(ctx context.Context, cmd *exec.Cmd) {
	for sleepCtx(ctx, 250*time.Millisecond) {
		c, leader, err := p.fetch()
		if err != nil {
			continue
		}
		p.mu.Lock()
		if p.cmd == cmd {
			p.cur, p.leader = c, leader
		}
		p.mu.Unlock()
	}
}

// stop scrapes a last time, then sends sig and waits for the process and any
// earlier one still finishing (SIGKILL after 20 s).
func (p *ctrlProc) stop(sig syscall.Signal) {
	p.halt(sig, false)
	p.lingering.Wait()
}

// replace stops the process as a replaced pod stops: once its manager is down
// (the lease released, its ports closed) a new one may start, while the old
// one still answers the preStop calls it holds, as a terminating pod does
// within its grace period (SIGKILL after 40 s).
func (p *ctrlProc) replace(sig syscall.Signal) {
	p.halt(sig, true)
}

func (p *ctrlProc) halt(sig syscall.Signal, linger bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.cancel()
	if c, _, err := p.fetch(); err == nil {
		p.cur = c
	}
	cmd, done := p.cmd, p.done
	_ = cmd.Process.Signal(sig)
	deadline := time.After(20 * time.Second)
wait:
	for {
		select {
		case <-done:
			break wait
		case <-deadline:
			_ = cmd.Process.Kill()
			<-done
			break wait
		case <-time.After(100 * time.Millisecond):
			// The metrics endpoint is the manager's: closed once it stopped.
			if _, _, err := p.fetch(); linger && err != nil {
				p.lingering.Add(1)
				go func() {
					defer p.lingering.Done()
					select {
					case <-done:
					case <-time.After(40 * time.Second):
						_ = cmd.Process.Kill()
						<-done
					}
				}()
				break wait
			}
		}
	}
	p.total = p.total.add(p.cur)
	p.cur, p.leader, p.cmd = counters{}, false, nil
}

func (p *ctrlProc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// counters returns the figures of every process so far.
func (p *ctrlProc) counters() counters {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total.add(p.cur)
}

// isLeader reports whether the running process holds the leader lease, from
// controller-runtime's leader_election_master_status.
func (p *ctrlProc) isLeader() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && p.leader
}

var scrapeClient = &http.Client{Timeout: 2 * time.Second}

// fetch reads the provider counters and the leader status.
func (p *ctrlProc) fetch() (counters, bool, error) {
	resp, err := scrapeClient.Get("http://" + p.metricsAddr + "/metrics")
	if err != nil {
		return counters{}, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return counters{}, false, fmt.Errorf("metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics sums zerodrop_provider_writes_total and
// zerodrop_provider_conflicts_total over their labels and reads
// leader_election_master_status, from the Prometheus text format.
func parseMetrics(r io.Reader) (counters, bool, error) {
	var c counters
	leader := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		switch name {
		case "zerodrop_provider_writes_total":
			c.writes += v
		case "zerodrop_provider_conflicts_total":
			c.conflicts += v
		case "leader_election_master_status":
			leader = leader || v == 1
		}
	}
	return c, leader, sc.Err()
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
