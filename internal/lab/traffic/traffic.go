package traffic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Traffic shape: bounded, on loopback only.
const (
	DefaultRate = 200                    // requests per second, open loop
	lateAfter   = 100 * time.Millisecond // a request starting later than this after its slot is late
	LongConns   = 4                      // long-lived WebSocket connections
	longPeriod  = 200 * time.Millisecond // one message per period on each
	IOTimeout   = 2 * time.Second
	maxEvents   = 2000 // failures kept for the report
	// maxTrafficTime bounds the request schedule whatever the context does:
	// no scenario runs its traffic this long (its act's bound plus settling).
	maxTrafficTime = 10 * time.Minute
)

// Failure kinds.
const (
	KindRefused = "refused" // connection refused
	KindReset   = "reset"   // connection reset (RST) or broken pipe
	KindTimeout = "timeout" // no answer within 2 s
	Kind5xx     = "5xx"     // a server error status
	KindEOF     = "eof"     // the connection ended before the response
	KindError   = "error"   // anything else
	KindLate    = "late"    // a request started more than lateAfter after its slot
	KindRetry   = "retry"   // the client opened more than one connection for a request
	KindLost    = "lost"    // a WebSocket message not echoed in time, or not the one sent
	KindNoClose = "noclose" // a WebSocket connection ended without a close frame
	KindClose   = "close"   // a WebSocket close frame with another status than 1001
)

// failure is one failed request or broken long connection.
type Failure struct {
	At     time.Duration `json:"at"`
	Source string        `json:"source"` // request, long
	Kind   string        `json:"kind"`
	Detail string        `json:"detail"`
}

// bucket is one second of the timeline.
type Bucket struct {
	Requests, Failures int
}

// recorder counts what the clients see, per second.
type Recorder struct {
	Start time.Time

	mu         sync.Mutex
	requests   int64
	failed     int64 // late requests included
	late       int64
	lateStall  int64 // late because the client's own timer fired late (lateStalled)
	longConns  int64
	longBroken int64
	longClosed int64 // ended by the server's close frame with status 1001
	exchanges  int64
	reconnects []time.Duration
	seconds    []Bucket
	failures   []Failure
	lastFail   time.Time
}

func NewRecorder() *Recorder { return &Recorder{Start: time.Now()} }

func (r *Recorder) bucket(now time.Time) *Bucket {
	s := int(now.Sub(r.Start) / time.Second)
	for len(r.seconds) <= s {
		r.seconds = append(r.seconds, Bucket{})
	}
	return &r.seconds[s]
}

func (r *Recorder) fail(source, kind, detail string) {
	now := time.Now()
	r.lastFail = now
	r.bucket(now).Failures++
	if len(r.failures) < maxEvents {
		r.failures = append(r.failures, Failure{At: now.Sub(r.Start), Source: source, Kind: kind, Detail: detail})
	}
}

// Why a request was late.
const (
	lateBacklog = "every worker was busy with earlier requests"
	lateStalled = "the client's timer fired late"
)

// request records one request: err is what it ended with, lateBy how much
// later than lateAfter after its slot it started (0: on time), why the
// reason. A late request is a failed request whatever its answer.
func (r *Recorder) request(err error, lateBy time.Duration, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	r.bucket(time.Now()).Requests++
	switch {
	case lateBy > 0:
		r.late++
		r.failed++
		if why == lateStalled {
			r.lateStall++
		}
		detail := fmt.Sprintf("started %s after its slot (%s)", (lateBy + lateAfter).Round(time.Millisecond), why)
		if err != nil {
			detail += "; then " + err.Error()
		}
		r.fail("request", KindLate, detail)
	case err != nil:
		r.failed++
		r.fail("request", classify(err), err.Error())
	}
}

// quietFor reports whether the clients have seen no failure for d (and the
// traffic has run that long).
func (r *Recorder) QuietFor(d time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Since(r.Start) >= d && time.Since(r.lastFail) >= d
}

// count adds one to the recorder's figure n (longConns, exchanges,
// longClosed).
func (r *Recorder) count(n *int64) {
	r.mu.Lock()
	*n++
	r.mu.Unlock()
}

func (r *Recorder) longBreak(kind, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.longBroken++
	r.fail("long", kind, detail)
}

func (r *Recorder) reconnected(d time.Duration) {
	r.mu.Lock()
	r.reconnects = append(r.reconnects, d)
	r.mu.Unlock()
}

// snapshot is the recorder's figures so far.
type Snapshot struct {
	Requests, Failed, Late, LateStall, LongConns, LongBroken, LongClosed, Exchanges int64
	// Reconnects is how long each long client took from the end of a
	// connection to its next completed handshake, sorted.
	Reconnects []time.Duration
	Seconds    []Bucket
	Failures   []Failure
}

func (r *Recorder) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Snapshot{
		Requests: r.requests, Failed: r.failed, Late: r.late, LateStall: r.lateStall, LongConns: r.longConns, LongBroken: r.longBroken,
		LongClosed: r.longClosed, Exchanges: r.exchanges,
		Reconnects: slices.Sorted(slices.Values(r.reconnects)),
		Seconds:    append([]Bucket(nil), r.seconds...), Failures: append([]Failure(nil), r.failures...),
	}
}

// reconnectStats is the median and the longest reconnect, 0 without any.
func (s Snapshot) ReconnectStats() (p50, longest time.Duration) {
	if n := len(s.Reconnects); n > 0 {
		return s.Reconnects[(n-1)/2], s.Reconnects[n-1]
	}
	return 0, 0
}

// classify names the failure an error stands for.
func classify(err error) string {
	var statusErr *statusError
	var netErr net.Error
	var retryErr *retryError
	switch {
	case errors.As(err, &retryErr):
		return KindRetry
	case errors.As(err, &statusErr):
		return Kind5xx
	case errors.Is(err, syscall.ECONNREFUSED):
		return KindRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return KindReset
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &netErr) && netErr.Timeout():
		return KindTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return KindEOF
	}
	return KindError
}

type statusError struct{ code int }

func (e *statusError) Error() string { return fmt.Sprintf("status %d", e.code) }

// runTraffic sends traffic to addr until ctx is done and returns when every
// client has stopped: open-loop requests at rate per second and the long
// WebSocket clients.
func RunTraffic(ctx context.Context, dial dialer, addr string, rate int, rec *Recorder) {
	var wg sync.WaitGroup
	wg.Go(func() { openLoop(ctx, dial, addr, rate, poolSize(rate), rec) })
	for i := range LongConns {
		wg.Go(func() {
			if SleepCtx(ctx, time.Duration(i)*longPeriod/LongConns) {
				longClient(ctx, dial, addr, rec)
			}
		})
	}
	wg.Wait()
}

// poolSize is how many requests may be in flight at once: enough to keep
// the schedule when every request takes its whole timeout (2 s at the rate,
// and a quarter more), so a load balancer that holds requests without an
// answer causes timeouts, each one failure, as for a crowd of independent
// clients, and not a backlog that would delay (and fail) the requests
// after them too. A request is then late only when the client itself fell
// behind.
func poolSize(rate int) int {
	return max(8, int(int64(rate)*int64(IOTimeout)/int64(time.Second))*5/4)
}

// openLoop sends requests on a fixed schedule: request i has the slot
// start + i/rate, whatever happened to the ones before (open loop: an
// outage does not slow the schedule down). A pool of workers takes the
// slots in order (workers of them); each request gets a fresh connection (no keep-alive), so
// Go's transport has no reused connection to retry on, and every
// connection a request opens is counted (more than one is a failure,
// kindRetry). Even slots are GET /, odd ones POST / with a small body. A
// request whose connection attempt starts more than lateAfter after its
// slot is late and failed.
func openLoop(ctx context.Context, dial dialer, addr string, rate, workers int, rec *Recorder) {
	if rate <= 0 {
		rate = DefaultRate
	}
	tr := &http.Transport{
		DialContext:           boundedDial(dial),
		DisableKeepAlives:     true,
		ResponseHeaderTimeout: IOTimeout,
		DisableCompression:    true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: IOTimeout}
	url := "http://" + addr + "/"
	start := time.Now()
	slots := int64(rate) * int64(maxTrafficTime/time.Second)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= slots {
					return
				}
				slot := start.Add(time.Duration(i) * time.Second / time.Duration(rate))
				// Whether the worker took the slot before it was due tells
				// a late start by the generator's own scheduling (a timer
				// that fired late on a busy machine) from a backlog (every
				// worker was still waiting for earlier answers).
				why := lateBacklog
				if time.Now().Before(slot) {
					why = lateStalled
				}
				if !SleepCtx(ctx, time.Until(slot)) {
					return
				}
				// A request under way when the traffic stops still
				// finishes (within ioTimeout) and counts: the end of the
				// window hides nothing.
				began, err := send(context.WithoutCancel(ctx), client, url, i%2 == 1)
				rec.request(err, max(began.Sub(slot)-lateAfter, 0), why)
			}
		})
	}
	wg.Wait()
}

// boundedDial is dial (nil: the lab process's own namespace) bounded by
// ioTimeout.
func boundedDial(dial dialer) dialer {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, IOTimeout)
		defer cancel()
		return dial(ctx, network, addr)
	}
}

// send makes one request and returns when its first connection attempt
// began (or the request did, when it never dialled) and what it ended with.
func send(ctx context.Context, client *http.Client, url string, post bool) (time.Time, error) {
	began := time.Now()
	var dials atomic.Int32
	var first atomic.Int64
	trace := &httptrace.ClientTrace{ConnectStart: func(string, string) {
		if dials.Add(1) == 1 {
			first.Store(time.Now().UnixNano())
		}
	}}
	method, body := http.MethodGet, io.Reader(nil)
	if post {
		method, body = http.MethodPost, strings.NewReader("zerodrop lab\n")
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), method, url, body)
	if err != nil {
		return began, err
	}
	err = do(client, req)
	if ns := first.Load(); ns != 0 {
		began = time.Unix(0, ns)
	}
	if n := dials.Load(); n > 1 && err == nil {
		err = &retryError{n}
	}
	return began, err
}

func do(client *http.Client, req *http.Request) error {
	resp, err := client.Do(req)
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

// get makes one GET request (the lab's own checks).
func Get(client *http.Client, url string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	return do(client, req)
}

// retryError is a request the transport sent on more than one connection.
type retryError struct{ conns int32 }

func (e *retryError) Error() string {
	return fmt.Sprintf("the client retried: %d connections for one request", e.conns)
}
