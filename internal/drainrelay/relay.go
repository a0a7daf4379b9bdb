// Package drainrelay is the drain relay: a small HTTP server that runs as a
// native sidecar (a restartable init container) in every pod the webhook
// gives the drain hook. The pod's preStop hook calls the relay on the pod's
// own address; the relay calls the drain endpoint of the controller replicas
// through the drain Service, and when a call is cut — the replica serving it
// killed, restarted or unreachable — it calls again, on whichever replica the
// Service picks next, until one answers or the pod's grace period is over.
//
// Why: the kubelet never retries an httpGet preStop hook. Without the relay
// a drain call cut by a controller replica's end fails the hook, and the
// kubelet stops the container at once, before any load balancer stopped
// sending it new connections. The relay outlives the app's containers (the
// kubelet stops sidecars after them), so it can keep the call alive.
//
// The relay only ever asks about its own pod (--pod, and its UID from the
// downward API), so calling it from elsewhere reveals nothing and drains
// nothing: the drain endpoint itself only waits and reports.
package drainrelay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"zerodrop.dev/zerodrop/internal/drain"
)

// MsgRetry is the log message of an attempt that failed and is made again
// (the lab counts them).
const MsgRetry = "drain call failed, calling again"

// UIDEnv is the environment variable with the pod's UID: the webhook sets it
// with a downward API fieldRef to metadata.uid (the UID does not exist yet
// when the pod is admitted, so it cannot be in the relay's arguments).
const UIDEnv = "ZERODROP_POD_UID"

// DefaultRefusedWindow is the default of Options.RefusedWindow: twice the
// drain endpoint's default CacheLag (5 s).
const DefaultRefusedWindow = 10 * time.Second

// answerSlack is the time an answer takes to be written once decided.
const answerSlack = 2 * time.Second

// Options configure a relay.
type Options struct {
	// Target is the drain endpoint's base URL, e.g. http://10.96.0.90:9090.
	Target string
	// Pod is the relay's own pod, namespace/name: the only one it asks
	// about.
	Pod string
	// UID is the pod's UID, sent with each call (the drain endpoint then
	// refuses a newer pod of the same name); empty: not sent.
	UID string
	// MaxWait bounds one call, retries included: the pod's grace period
	// (the kubelet gives up on the hook then anyway).
	MaxWait time.Duration
	// Retry is the pause after a failed attempt (default 250ms).
	Retry time.Duration
	// RefusedWindow is how long after the hook's call a refusal (404: no
	// terminating pod of that name) is called again (default
	// DefaultRefusedWindow). The drain endpoint looks for the pod for its
	// CacheLag before it refuses, but a replica whose cache lags longer
	// (a slow API server, a re-list) refuses a pod that is terminating; a
	// later call may reach one that sees the deletion. Not until MaxWait: a
	// preStop hook also runs when a container restarts (after a liveness
	// failure) in a pod that is not terminating, and that restart waits for
	// the refusal.
	RefusedWindow time.Duration
	// DialTimeout bounds one attempt's connect (default 2s). The drain
	// Service may still send a new connection to a replica that is gone:
	// its address then drops the SYN rather than refuse it, and without a
	// bound the connect would wait out the whole grace period.
	DialTimeout time.Duration
	// Client makes the calls (default: no overall timeout — a drain call is
	// held until the pod is drained — DialTimeout per connect, TCP
	// keep-alive probes that find a peer gone without a word within about
	// 10 s, and no connection reuse, so each attempt opens a new connection
	// that the drain Service balances afresh).
	Client *http.Client
	Logger *slog.Logger
}

// Handler serves GET /drain?pod=<namespace>/<name> (drain.Path: the drain
// endpoint's own path) for its own pod only, and passes back the drain
// endpoint's answer with its drain.ResultHeader.
type Handler struct {
	opts   Options
	target string
}

// NewHandler checks the options and returns the relay's handler.
func NewHandler(o Options) (*Handler, error) {
	u, err := url.Parse(o.Target)
	if err != nil || u.Scheme != "http" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("target %q: want http://HOST:PORT", o.Target)
	}
	if ns, name, ok := strings.Cut(o.Pod, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("pod %q: want namespace/name", o.Pod)
	}
	if o.MaxWait <= 0 {
		return nil, fmt.Errorf("max wait %s: want more than 0", o.MaxWait)
	}
	if o.Retry <= 0 {
		o.Retry = 250 * time.Millisecond
	}
	if o.RefusedWindow <= 0 {
		o.RefusedWindow = DefaultRefusedWindow
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 2 * time.Second
	}
	if o.Client == nil {
		d := &net.Dialer{Timeout: o.DialTimeout,
			KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 4 * time.Second, Interval: 2 * time.Second, Count: 3}}
		o.Client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: d.DialContext}}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	q := url.Values{"pod": {o.Pod}}
	if o.UID != "" {
		q.Set("uid", o.UID)
	}
	return &Handler{opts: o, target: strings.TrimSuffix(o.Target, "/") + drain.Path + "?" + q.Encode()}, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path != drain.Path {
		http.Error(w, "GET "+drain.Path+"?pod=<namespace>/<name>", http.StatusNotFound)
		return
	}
	if pod := r.URL.Query().Get("pod"); pod != "" && pod != h.opts.Pod {
		http.Error(w, "this relay serves pod "+h.opts.Pod+" only", http.StatusForbidden)
		return
	}
	// The call is held up to MaxWait: the server's read and write timeouts,
	// meant for calls answered at once, must not cut it (errors: a writer
	// without deadlines, nothing to extend).
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(h.opts.MaxWait + answerSlack))
	_ = rc.SetWriteDeadline(time.Now().Add(h.opts.MaxWait + answerSlack))
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.MaxWait)
	defer cancel()
	code, result, body, err := h.call(ctx)
	if err != nil {
		// Nothing answered in time: the same answer as the drain
		// endpoint's at its deadline, so the hook fails the same way.
		w.Header().Set(drain.ResultHeader, "timeout")
		http.Error(w, "timeout: "+err.Error(), http.StatusGatewayTimeout)
		return
	}
	if result != "" {
		w.Header().Set(drain.ResultHeader, result)
	}
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// call asks the drain endpoint until an answer comes: a call cut before its
// answer (connection refused, reset, EOF) or answered 503 (the replica is
// busy or not ready) is made again after Retry, as a new connection, and so
// is one answered 404 (refused) within RefusedWindow of the start. It
// returns the first other answer (a 404 after the window), or an error when
// ctx ends first (the last 404, if the last attempt was refused).
func (h *Handler) call(ctx context.Context) (code int, result string, body []byte, err error) {
	log := h.opts.Logger.With("pod", h.opts.Pod)
	start := time.Now()
	var last error
	type answer struct {
		code   int
		result string
		body   []byte
	}
	// The drain endpoint's last word, when it was a refusal (a cut attempt
	// says nothing).
	var refusal *answer
	for attempt := 1; ; attempt++ {
		code, result, body, err := h.once(ctx)
		retry := err != nil || code == http.StatusServiceUnavailable ||
			code == http.StatusNotFound && time.Since(start) < h.opts.RefusedWindow
		if !retry {
			if attempt > 1 {
				log.Info("drain call answered after retries", "attempts", attempt, "result", result, "status", code,
					"waited", time.Since(start).Round(time.Millisecond))
			}
			return code, result, body, nil
		}
		if err == nil {
			refusal = nil
			if code == http.StatusNotFound {
				refusal = &answer{code, result, body}
			}
			err = fmt.Errorf("answered %d %s", code, strings.TrimSpace(string(body)))
		}
		if ctx.Err() != nil {
			if refusal != nil {
				// Refused to the end: the refusal is the answer.
				return refusal.code, refusal.result, refusal.body, nil
			}
			// The attempt cut by the end of ctx says nothing: report the
			// one before it.
			if last == nil {
				last = err
			}
			return 0, "", nil, fmt.Errorf("no answer after %d attempts in %s; last: %w",
				attempt, time.Since(start).Round(time.Millisecond), last)
		}
		last = err
		log.Info(MsgRetry, "attempt", attempt, "error", last.Error())
		select {
		case <-ctx.Done():
		case <-time.After(h.opts.Retry):
		}
	}
}

func (h *Handler) once(ctx context.Context) (int, string, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.target, nil)
	if err != nil {
		return 0, "", nil, err
	}
	resp, err := h.opts.Client.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	// The answers are a word or a sentence; 64 KiB bounds a wrong peer.
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, "", nil, fmt.Errorf("reading the answer: %w", err)
	}
	return resp.StatusCode, resp.Header.Get(drain.ResultHeader), body, nil
}
