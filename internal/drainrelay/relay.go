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
// nothing: the drain endpoint itself only waits and reports. Still, any pod
// can reach the relay's port, so (issue 46) a call must carry the pod's
// token (TokenHeader, which the webhook puts in the hook's httpHeaders and
// in the relay's TokenEnv): without it the call is refused at once and
// neither starts nor joins a drain call. Every authenticated caller shares
// one drain call (a flight), and the relay accepts an answer only with the
// drain endpoint's proof under the token (drain.Proof), so that whoever
// captures the drain address cannot answer "drained".
package drainrelay

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"zerodrop.dev/zerodrop/internal/connguard"
	"zerodrop.dev/zerodrop/internal/drain"
)

// MsgRetry is the log message of an attempt that failed and is made again
// (the lab counts them).
const MsgRetry = "drain call failed, calling again"

// UIDEnv is the environment variable with the pod's UID: the webhook sets it
// with a downward API fieldRef to metadata.uid (the UID does not exist yet
// when the pod is admitted, so it cannot be in the relay's arguments).
const UIDEnv = "ZERODROP_POD_UID"

// TokenEnv is the environment variable with the pod's token (drain.PodToken,
// set by the webhook at admission); TokenHeader carries it on the hook's
// call.
const (
	TokenEnv    = "ZERODROP_RELAY_TOKEN"
	TokenHeader = "X-Zerodrop-Relay-Token"
)

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
	// Token is the pod's token (drain.PodToken). Set: a call without it in
	// TokenHeader is refused with 403, and only answers proven under it
	// (drain.ProofHeader) are accepted — any other is an attempt that
	// failed, called again until MaxWait. Empty (a pod admitted before
	// tokens existed): neither is checked.
	Token string
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

	mu     sync.Mutex
	flight *flight // the drain call in flight, shared by every caller
}

// flight is one drain call, retries included, shared by every
// authenticated caller that comes while it runs: the kubelet calls the
// hook of each container, and a caller that goes away must not cut the
// call of the others. It ends at MaxWait from its start, or when its last
// caller has gone.
type flight struct {
	done    chan struct{} // closed when the fields below are final
	cancel  context.CancelFunc
	callers int // under Handler.mu
	code    int
	result  string
	body    []byte
	err     error
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
	if h.opts.Token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get(TokenHeader)), []byte(h.opts.Token)) != 1 {
		// Before anything else: an unauthenticated call must not start or
		// join the drain call (it could otherwise have the drain endpoint's
		// early refusal answered to the kubelet's own call).
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	// The kubelet's call (or, without a token, any call: an old pod's):
	// its connection is no longer one of the flood's to close (false: not
	// a guarded connection, as in tests, or already closed).
	_ = connguard.TrustRequest(r)
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
	code, result, body, err := h.shared(r.Context())
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

// shared joins the drain call in flight, or starts one, and waits for its
// answer or for ctx (the caller gone: nothing to answer).
func (h *Handler) shared(ctx context.Context) (int, string, []byte, error) {
	h.mu.Lock()
	f := h.flight
	if f == nil {
		// Detached from the caller: bounded by MaxWait, ended early only
		// when every caller has gone (leave).
		fctx, cancel := context.WithTimeout(context.Background(), h.opts.MaxWait)
		f = &flight{done: make(chan struct{}), cancel: cancel}
		h.flight = f
		go func() {
			defer cancel()
			f.code, f.result, f.body, f.err = h.call(fctx)
			h.mu.Lock()
			if h.flight == f {
				// A later caller starts a new call: a verdict is not kept.
				h.flight = nil
			}
			h.mu.Unlock()
			close(f.done)
		}()
	}
	f.callers++
	h.mu.Unlock()
	defer h.leave(f)
	select {
	case <-f.done:
		return f.code, f.result, f.body, f.err
	case <-ctx.Done():
		return 0, "", nil, ctx.Err()
	}
}

// leave ends the flight once no caller waits on it any more.
func (h *Handler) leave(f *flight) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f.callers--; f.callers == 0 {
		f.cancel()
		if h.flight == f {
			h.flight = nil
		}
	}
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

// errUnproven: an answer without a valid proof under the pod's token — not
// the drain endpoint's, or an old replica's; an attempt that failed.
var errUnproven = errors.New("answer without a valid proof of the drain endpoint")

func (h *Handler) once(ctx context.Context) (int, string, []byte, error) {
	target, nonce := h.target, ""
	if h.opts.Token != "" {
		var b [18]byte
		if _, err := rand.Read(b[:]); err != nil {
			return 0, "", nil, fmt.Errorf("nonce: %w", err)
		}
		nonce = base64.RawURLEncoding.EncodeToString(b[:])
		target += "&" + drain.NonceParam + "=" + nonce
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
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
	result := resp.Header.Get(drain.ResultHeader)
	if h.opts.Token != "" && !drain.ValidProof(resp.Header.Get(drain.ProofHeader), h.opts.Token, h.opts.Pod, h.opts.UID, nonce, resp.StatusCode, result) {
		return 0, "", nil, fmt.Errorf("%w (answered %d %q)", errUnproven, resp.StatusCode, result)
	}
	return resp.StatusCode, result, body, nil
}
