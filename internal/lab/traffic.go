package lab

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

// Traffic shape: bounded, on loopback only.
const (
	steadyWorkers  = 4                      // keep-alive HTTP clients
	steadyInterval = 80 * time.Millisecond  // per worker: 12.5 req/s, 50 req/s in all
	sessionLength  = 10                     // requests per client connection
	longConns      = 4                      // long-lived connections
	longPeriod     = 200 * time.Millisecond // one exchange per period on each
	ioTimeout      = 2 * time.Second
	maxEvents      = 2000 // failures kept for the report
)

// Failure kinds.
const (
	kindRefused = "refused" // connection refused
	kindReset   = "reset"   // connection reset (RST) or broken pipe
	kindTimeout = "timeout" // no answer within 2 s
	kind5xx     = "5xx"     // a server error status
	kindEOF     = "eof"     // the connection ended before the response
	kindError   = "error"   // anything else
)

// failure is one failed request or broken long connection.
type failure struct {
	At     time.Duration `json:"at"`
	Source string        `json:"source"` // request, long
	Kind   string        `json:"kind"`
	Detail string        `json:"detail"`
}

// bucket is one second of the timeline.
type bucket struct {
	Requests, Failures int
}

// recorder counts what the clients see, per second.
type recorder struct {
	start time.Time

	mu         sync.Mutex
	requests   int64
	failed     int64
	longConns  int64
	longBroken int64
	longClosed int64 // closed cleanly by the server while idle
	exchanges  int64
	seconds    []bucket
	failures   []failure
}

func newRecorder() *recorder { return &recorder{start: time.Now()} }

func (r *recorder) bucket(now time.Time) *bucket {
	s := int(now.Sub(r.start) / time.Second)
	for len(r.seconds) <= s {
		r.seconds = append(r.seconds, bucket{})
	}
	return &r.seconds[s]
}

func (r *recorder) fail(source, kind, detail string) {
	now := time.Now()
	r.bucket(now).Failures++
	if len(r.failures) < maxEvents {
		r.failures = append(r.failures, failure{At: now.Sub(r.start), Source: source, Kind: kind, Detail: detail})
	}
}

func (r *recorder) request(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	r.bucket(time.Now()).Requests++
	if err != nil {
		r.failed++
		r.fail("request", classify(err), err.Error())
	}
}

func (r *recorder) longOpened() {
	r.mu.Lock()
	r.longConns++
	r.mu.Unlock()
}

func (r *recorder) longExchange() {
	r.mu.Lock()
	r.exchanges++
	r.mu.Unlock()
}

func (r *recorder) longBreak(kind, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.longBroken++
	r.fail("long", kind, detail)
}

func (r *recorder) longClose() {
	r.mu.Lock()
	r.longClosed++
	r.mu.Unlock()
}

// snapshot is the recorder's figures so far.
type snapshot struct {
	Requests, Failed, LongConns, LongBroken, LongClosed, Exchanges int64
	Seconds                                                        []bucket
	Failures                                                       []failure
}

func (r *recorder) snapshot() snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return snapshot{
		Requests: r.requests, Failed: r.failed, LongConns: r.longConns, LongBroken: r.longBroken,
		LongClosed: r.longClosed, Exchanges: r.exchanges,
		Seconds: append([]bucket(nil), r.seconds...), Failures: append([]failure(nil), r.failures...),
	}
}

// classify names the failure an error stands for.
func classify(err error) string {
	var statusErr *statusError
	var netErr net.Error
	switch {
	case errors.As(err, &statusErr):
		return kind5xx
	case errors.Is(err, syscall.ECONNREFUSED):
		return kindRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return kindReset
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &netErr) && netErr.Timeout():
		return kindTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return kindEOF
	}
	return kindError
}

type statusError struct{ code int }

func (e *statusError) Error() string { return fmt.Sprintf("status %d", e.code) }

// runTraffic sends traffic to addr until ctx is done and returns when every
// client has stopped.
func runTraffic(ctx context.Context, addr string, rec *recorder) {
	var wg sync.WaitGroup
	for i := range steadyWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread the workers over the interval.
			if sleepCtx(ctx, time.Duration(i)*steadyInterval/steadyWorkers) {
				steadyClient(ctx, addr, rec)
			}
		}()
	}
	for i := range longConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if sleepCtx(ctx, time.Duration(i)*longPeriod/longConns) {
				longClient(ctx, addr, rec)
			}
		}()
	}
	wg.Wait()
}

// steadyClient is a Go net/http client making keep-alive requests: a client
// session of sessionLength requests on one connection, then the next
// session on a new connection. Like any net/http client it retries a request
// on a new connection when the server closed an idle keep-alive connection
// just as the request was sent (RFC 9112 §9.3.1); everything else that goes
// wrong is a failed request.
func steadyClient(ctx context.Context, addr string, rec *recorder) {
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: ioTimeout}).DialContext,
		MaxIdleConnsPerHost:   1,
		ResponseHeaderTimeout: ioTimeout,
		DisableCompression:    true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: ioTimeout}
	url := "http://" + addr + "/"
	t := time.NewTicker(steadyInterval)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rec.request(get(client, url))
		if n%sessionLength == 0 {
			tr.CloseIdleConnections()
		}
	}
}

func get(client *http.Client, url string) error {
	resp, err := client.Get(url)
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

// longClient keeps one long-lived connection and exchanges a request on it
// every longPeriod. Between exchanges it watches the connection: when the
// server closes it cleanly (FIN) while idle, or announces the close with
// `Connection: close`, the connection ended normally and the client opens a
// new one. The connection is broken when an exchange fails (reset, timeout,
// EOF before the whole response, a 5xx) or it is reset while idle; the
// client then opens a new one too. A connection that cannot be opened counts
// as a broken connection.
func longClient(ctx context.Context, addr string, rec *recorder) {
	for ctx.Err() == nil {
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, ioTimeout)
		conn, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if ctx.Err() != nil {
			return
		}
		rec.longOpened()
		if err != nil {
			rec.longBreak(classify(err), "dial: "+err.Error())
			sleepCtx(ctx, longPeriod)
			continue
		}
		longSession(ctx, conn, rec)
		conn.Close()
	}
}

func longSession(ctx context.Context, conn net.Conn, rec *recorder) {
	br := bufio.NewReader(conn)
	next := time.Now()
	for {
		// Idle until the next exchange, watching for the server's close.
		_ = conn.SetReadDeadline(next)
		_, err := br.Peek(1)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			rec.longBreak(kindError, "data from the server while idle")
			return
		case errors.Is(err, io.EOF):
			rec.longClose()
			return
		case !errors.Is(err, os.ErrDeadlineExceeded):
			rec.longBreak(classify(err), "idle: "+err.Error())
			return
		}
		next = time.Now().Add(longPeriod)
		closing, err := exchange(conn, br)
		if err != nil {
			if ctx.Err() == nil {
				rec.longBreak(classify(err), err.Error())
				sleepCtx(ctx, longPeriod)
			}
			return
		}
		rec.longExchange()
		if closing {
			rec.longClose()
			return
		}
	}
}

// exchange sends one request and reads the response; closing is true when
// the server said it closes the connection after it.
func exchange(conn net.Conn, br *bufio.Reader) (closing bool, err error) {
	_ = conn.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := io.WriteString(conn, "GET /long HTTP/1.1\r\nHost: lab\r\n\r\n"); err != nil {
		return false, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return false, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return false, err
	}
	if resp.StatusCode >= 500 {
		return false, &statusError{resp.StatusCode}
	}
	return resp.Close, nil
}
