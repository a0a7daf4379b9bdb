package traffic

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// PeerHeader is the header of a pod's WebSocket handshake answer that
// names the address the pod saw the connection come from: through
// HAProxy (TCP mode, no PROXY protocol) the data-plane host's, so a
// client can tell which replica its connection went through.
const PeerHeader = "X-Lab-Peer"

// TimedConn is one WebSocket of TimedWebSockets: opened, kept (a message
// every longPeriod, each echo awaited as the lab's long clients do) for
// Lifetime, then closed by the client with status 1000. What ended it
// otherwise is Broken (with Kind and Detail, longSession's reasons) or
// GoingAway (the pod's close frame 1001, not a break).
type TimedConn struct {
	Lifetime time.Duration
	// Opened is when the handshake completed (zero: it failed, which is
	// Broken); Ended when the connection ended.
	Opened, Ended time.Time
	// Peer is the pod's PeerHeader ("": the pod did not say).
	Peer      string
	Broken    bool
	GoingAway bool
	Kind      string
	Detail    string
}

// TimedWebSockets opens a WebSocket to addr's /ws for each lifetime, one
// every every (the first at once), each on a fresh TCP connection, until
// the lifetimes or open (false: stop opening) run out, and returns when
// every one opened has ended (or ctx is done: the rest are closed with
// 1000, as at their lifetime). Each is counted in its own Recorder, so the
// run's figures are the lab's 4 long clients' alone.
func TimedWebSockets(ctx context.Context, dial dialer, addr string, lifetimes []time.Duration, every time.Duration, open func() bool) []*TimedConn {
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: boundedDial(dial)}}
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		out []*TimedConn
	)
	for i, life := range lifetimes {
		if i > 0 && !SleepCtx(ctx, every) || !open() {
			break
		}
		tc := &TimedConn{Lifetime: life}
		mu.Lock()
		out = append(out, tc)
		mu.Unlock()
		wg.Go(func() { tc.run(ctx, hc, "ws://"+addr+"/ws") })
	}
	wg.Wait()
	return out
}

// run is one timed connection: the handshake, then longSession until its
// lifetime (its context's end, which longSession counts as the client's
// own close).
func (tc *TimedConn) run(ctx context.Context, hc *http.Client, url string) {
	rec := NewRecorder()
	dctx, cancel := context.WithTimeout(ctx, IOTimeout)
	c, resp, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPClient: hc, CompressionMode: websocket.CompressionDisabled})
	cancel()
	if err != nil {
		tc.Ended, tc.Broken, tc.Kind, tc.Detail = time.Now(), true, classify(err), "handshake: "+err.Error()
		return
	}
	tc.Opened = time.Now()
	if resp != nil {
		tc.Peer = resp.Header.Get(PeerHeader)
	}
	lctx, stop := context.WithTimeout(ctx, tc.Lifetime)
	longSession(lctx, c, rec)
	stop()
	tc.Ended = time.Now()
	s := rec.Snapshot()
	tc.GoingAway = s.LongClosed > 0
	if s.LongBroken > 0 && len(s.Failures) > 0 {
		tc.Broken, tc.Kind, tc.Detail = true, s.Failures[0].Kind, s.Failures[0].Detail
	}
}
