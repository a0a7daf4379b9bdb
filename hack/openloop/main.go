// Command openloop is an outside client for the lab: it sends HTTP requests
// on an open-loop schedule and prints one JSON line counting what failed.
//
//	go run ./hack/openloop --url http://ADDR:PORT/ --rate 200 --duration 30s
//
// Request i starts at start + i/rate whatever happened to the earlier ones,
// so a stalled load balancer cannot slow the client down and hide failures
// (a closed loop would send fewer requests while it stalls). Each request
// uses a new TCP connection and is never retried: a connection refused,
// reset or not answered within the timeout, or an answer other than 2xx,
// is a failed request. So is a request that started more than 100 ms after
// its slot (late): the client itself fell behind and did not measure what
// it was asked to. Requests alternate GET and POST with a small body.
//
// It exits 0 whatever failed (it measures), non-zero on bad flags. It does
// not import the lab, so it counts independently of the lab's own traffic.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

const (
	// maxDuration bounds one run, so a typo cannot leave a load running.
	maxDuration = 10 * time.Minute
	// lateAfter: a request starting later than this after its slot is late.
	lateAfter = 100 * time.Millisecond
)

type config struct {
	url      string
	rate     float64       // requests per second
	duration time.Duration // the schedule spans [start, start+duration)
	timeout  time.Duration // per request, connect to end of body
}

// requests is how many slots the schedule has.
func (c config) requests() int { return int(c.rate * c.duration.Seconds()) }

// result is the JSON line printed.
type result struct {
	URL         string    `json:"url"`
	Rate        float64   `json:"rate"`
	Requests    int       `json:"requests"`
	OK          int       `json:"ok"`
	Failed      int       `json:"failed"`
	Late        int       `json:"late"`
	FailureRate float64   `json:"failure_rate"` // percent of requests
	FirstError  string    `json:"first_error,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	// FailedBySecond counts failed requests by the second of their slot
	// since Start, to line up with another client's timeline.
	FailedBySecond []int `json:"failed_by_second"`
}

func main() {
	cfg, err := parseFlags(os.Args[1:], time.Now())
	if err != nil {
		fmt.Fprintln(os.Stderr, "openloop:", err)
		os.Exit(2)
	}
	// SIGINT or SIGTERM ends the schedule early: no more requests are
	// started, those in flight finish, and the summary covers what was sent
	// (so a caller can stop it when the window it measures ends).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	res := run(ctx, cfg)
	stop()
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "openloop:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, now time.Time) (config, error) {
	fs := flag.NewFlagSet("openloop", flag.ContinueOnError)
	var cfg config
	var until string
	fs.StringVar(&cfg.url, "url", "", "URL to request (http://ADDR:PORT/)")
	fs.Float64Var(&cfg.rate, "rate", 0, "requests per second")
	fs.DurationVar(&cfg.duration, "duration", 0, "how long to send (at most 10m)")
	fs.StringVar(&until, "until", "", "send until this time (RFC 3339), instead of --duration")
	fs.DurationVar(&cfg.timeout, "timeout", time.Second, "per-request timeout")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	u, err := url.Parse(cfg.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return config{}, fmt.Errorf("--url %q: want http://ADDR:PORT/", cfg.url)
	}
	if !(cfg.rate > 0) {
		return config{}, fmt.Errorf("--rate %v: want > 0", cfg.rate)
	}
	if cfg.timeout <= 0 {
		return config{}, fmt.Errorf("--timeout %s: want > 0", cfg.timeout)
	}
	switch {
	case until != "" && cfg.duration != 0:
		return config{}, errors.New("give --duration or --until, not both")
	case until != "":
		t, err := time.Parse(time.RFC3339, until)
		if err != nil {
			return config{}, fmt.Errorf("--until: %w", err)
		}
		if cfg.duration = t.Sub(now); cfg.duration <= 0 {
			return config{}, fmt.Errorf("--until %s is in the past", until)
		}
	case cfg.duration <= 0:
		return config{}, errors.New("--duration (> 0) or --until is required")
	}
	if cfg.duration > maxDuration {
		return config{}, fmt.Errorf("run of %s: at most %s", cfg.duration.Round(time.Second), maxDuration)
	}
	if cfg.requests() < 1 {
		return config{}, fmt.Errorf("--rate %v over %s schedules no request", cfg.rate, cfg.duration)
	}
	return cfg, nil
}

// tally collects the outcomes.
type tally struct {
	mu  sync.Mutex
	res result
}

func (t *tally) ok() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.res.OK++
}

func (t *tally) fail(late bool, err error, second int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.res.Failed++
	for len(t.res.FailedBySecond) <= second {
		t.res.FailedBySecond = append(t.res.FailedBySecond, 0)
	}
	t.res.FailedBySecond[second]++
	if late {
		t.res.Late++
	}
	if t.res.FirstError == "" {
		t.res.FirstError = err.Error()
	}
	t.res.LastError = err.Error()
}

// run sends cfg.requests() requests on the schedule and waits for the last
// to finish.
func run(ctx context.Context, cfg config) result {
	n := cfg.requests()
	transport := &http.Transport{
		// A new connection per request: a request is never sent on (nor
		// retried on) a connection an earlier one used, so each counts
		// what a new client would see. No proxy from the environment.
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{Timeout: cfg.timeout}).DialContext,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: cfg.timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	t := &tally{res: result{URL: cfg.url, Rate: cfg.rate, Requests: n}}
	var wg sync.WaitGroup
	start := time.Now()
	t.res.Start = start
	timer := time.NewTimer(0)
	defer timer.Stop()
	// Requests in flight when ctx ends still finish and count.
	reqCtx := context.WithoutCancel(ctx)
	sent := 0
	for i := 0; i < n && ctx.Err() == nil; i++ {
		slot := start.Add(time.Duration(float64(i) / cfg.rate * float64(time.Second)))
		if d := time.Until(slot); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				continue
			}
		}
		sent++
		wg.Add(1)
		go func(i int, slot time.Time) {
			defer wg.Done()
			one(reqCtx, client, cfg, t, i, slot)
		}(i, slot)
	}
	wg.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.res.End = time.Now()
	t.res.Requests = sent
	if sent > 0 {
		t.res.FailureRate = 100 * float64(t.res.Failed) / float64(sent)
	}
	return t.res
}

// one sends request i and records its outcome.
func one(ctx context.Context, client *http.Client, cfg config, t *tally, i int, slot time.Time) {
	method, body := http.MethodGet, []byte(nil)
	if i%2 == 1 {
		method, body = http.MethodPost, []byte(fmt.Sprintf("openloop request %d\n", i))
	}
	req, err := http.NewRequestWithContext(ctx, method, cfg.url, bytes.NewReader(body))
	if err != nil {
		t.fail(false, fmt.Errorf("request %d: %w", i, err), int(slot.Sub(t.res.Start)/time.Second))
		return
	}
	reused := false
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
	}))
	began := time.Now()
	// A late request is still sent, so the load stays what the schedule
	// says, but it fails whatever the answer.
	late := began.Sub(slot) > lateAfter
	resp, err := client.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			err = fmt.Errorf("%s %s: reading body: %w", method, cfg.url, err)
		case reused:
			err = fmt.Errorf("%s %s: sent on a reused connection", method, cfg.url)
		case resp.StatusCode < 200 || resp.StatusCode > 299:
			err = fmt.Errorf("%s %s: %s", method, cfg.url, resp.Status)
		}
	}
	switch {
	case late:
		if err == nil {
			err = fmt.Errorf("%s %s: started %s after its slot", method, cfg.url, began.Sub(slot).Round(time.Millisecond))
		}
		t.fail(true, fmt.Errorf("request %d (late): %w", i, err), int(slot.Sub(t.res.Start)/time.Second))
	case err != nil:
		t.fail(false, fmt.Errorf("request %d: %w", i, err), int(slot.Sub(t.res.Start)/time.Second))
	default:
		t.ok()
	}
}
