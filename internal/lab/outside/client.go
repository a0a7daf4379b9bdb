package outside

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"
)

// DefaultTimeout bounds one request, connection included. It is the lab
// client's bound too (2 s): a request the load balancer holds longer fails
// in both, so the two count the same thing.
const DefaultTimeout = 2 * time.Second

// MaxDuration bounds a client's schedule whatever its caller does (a lab
// killed before it could stop it): no lab run's traffic is this long.
const MaxDuration = 15 * time.Minute

// Failure kinds, named by this package (not the lab client's).
const (
	KindRefused = "refused" // the connection was refused
	KindReset   = "reset"   // reset (RST) or a broken pipe
	KindTimeout = "timeout" // no complete answer within the timeout
	KindEOF     = "eof"     // the connection ended before a complete answer
	Kind5xx     = "5xx"     // a server error status
	KindOther   = "other"   // anything else
)

// Config is one client's schedule and target.
type Config struct {
	// Target is host:port; each request is GET http://Target/.
	Target string
	// Rate is requests started per second, open loop.
	Rate int
	// Timeout bounds each request (default DefaultTimeout).
	Timeout time.Duration
	// MaxRequests and MaxDuration bound the schedule (0: Rate times
	// MaxDuration, and MaxDuration).
	MaxRequests int64
	MaxDuration time.Duration
	// Dial opens a connection (default a net.Dialer's, in the process's
	// own namespace).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Second is one second of the schedule: the requests whose slot falls in
// it, and how many of them failed.
type Second struct {
	Sent   int64 `json:"sent"`
	Failed int64 `json:"failed"`
}

// Counts are what a client saw. Every request started is in Sent and is
// either OK or in Failed (by kind); a request under way when the schedule
// stops still finishes and counts.
type Counts struct {
	Target    string `json:"target"`
	Rate      int    `json:"rate"`
	TimeoutMs int64  `json:"timeout_ms"`
	// Start and End bound the schedule (RFC 3339, milliseconds).
	Start        string           `json:"start"`
	End          string           `json:"end"`
	Sent         int64            `json:"sent"`
	OK           int64            `json:"ok"`
	Failed       int64            `json:"failed"`
	FailedByKind map[string]int64 `json:"failed_by_kind"`
	// LateMaxMs is the latest a request started after its slot: the
	// client's own stalls (they are not failures: no backlog can form,
	// every request has a goroutine of its own).
	LateMaxMs float64  `json:"late_max_ms"`
	Seconds   []Second `json:"seconds"`
}

// Run sends requests until ctx is done or a bound is reached, then waits
// for the requests under way and returns the counts.
func Run(ctx context.Context, cfg Config) Counts {
	cfg = withDefaults(cfg)
	start := time.Now()
	c := &counter{counts: Counts{Target: cfg.Target, Rate: cfg.Rate, TimeoutMs: cfg.Timeout.Milliseconds(),
		Start: stamp(start), FailedByKind: map[string]int64{}}}
	var wg sync.WaitGroup
	end := start.Add(cfg.MaxDuration)
	for i := int64(0); i < cfg.MaxRequests; i++ {
		slot := start.Add(time.Duration(i) * time.Second / time.Duration(cfg.Rate))
		if !slot.Before(end) || !sleepUntil(ctx, slot) {
			break
		}
		late := time.Since(slot)
		sec := int(slot.Sub(start) / time.Second)
		// Open loop: the next slot does not wait for this answer. A
		// request under way when ctx ends still finishes and counts.
		wg.Go(func() { c.add(sec, late, one(context.WithoutCancel(ctx), cfg)) })
	}
	c.mu.Lock()
	c.counts.End = stamp(time.Now())
	c.mu.Unlock()
	wg.Wait()
	return c.counts
}

func withDefaults(cfg Config) Config {
	if cfg.Rate <= 0 {
		cfg.Rate = 1
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxDuration <= 0 || cfg.MaxDuration > MaxDuration {
		cfg.MaxDuration = MaxDuration
	}
	if limit := int64(cfg.Rate) * int64(cfg.MaxDuration/time.Second); cfg.MaxRequests <= 0 || cfg.MaxRequests > limit {
		cfg.MaxRequests = max(limit, 1)
	}
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{}).DialContext
	}
	return cfg
}

// sleepUntil waits for t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// counter adds requests' outcomes to counts.
type counter struct {
	mu     sync.Mutex
	counts Counts
}

func (c *counter) add(sec int, late time.Duration, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.counts.Seconds) <= sec {
		c.counts.Seconds = append(c.counts.Seconds, Second{})
	}
	c.counts.Sent++
	c.counts.Seconds[sec].Sent++
	if ms := float64(late.Microseconds()) / 1000; ms > c.counts.LateMaxMs {
		c.counts.LateMaxMs = ms
	}
	if err == nil {
		c.counts.OK++
		return
	}
	c.counts.Failed++
	c.counts.Seconds[sec].Failed++
	c.counts.FailedByKind[kind(err)]++
}

// one makes one request on a new connection: GET /, Connection: close, the
// whole answer read, all within cfg.Timeout.
func one(ctx context.Context, cfg Config) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	conn, err := cfg.Dial(ctx, "tcp", cfg.Target)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\nUser-Agent: zerodrop-lab-outside-client\r\nConnection: close\r\n\r\n", cfg.Target); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode >= 500 {
		return &statusError{resp.StatusCode}
	}
	return nil
}

type statusError struct{ code int }

func (e *statusError) Error() string { return fmt.Sprintf("status %d", e.code) }

// kind names the failure err stands for.
func kind(err error) string {
	var status *statusError
	var nerr net.Error
	switch {
	case errors.As(err, &status):
		return Kind5xx
	case errors.Is(err, syscall.ECONNREFUSED):
		return KindRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return KindReset
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &nerr) && nerr.Timeout():
		return KindTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return KindEOF
	}
	return KindOther
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }
