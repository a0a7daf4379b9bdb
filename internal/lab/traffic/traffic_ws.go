package traffic

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"
)

// longClient keeps one WebSocket connection to addr's /ws (through the load
// balancer) and sends a message every longPeriod, expecting its echo within
// ioTimeout. When a connection ends it opens a new one and records how long
// that took from the end of the last one. See longSession for what is
// closed and what is broken; a handshake that fails is a broken connection
// too, and the client tries again after longPeriod.
func longClient(ctx context.Context, dial dialer, addr string, rec *Recorder) {
	// A fresh TCP connection per handshake; the dial is bounded by its
	// context (the library refuses a client timeout).
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: boundedDial(dial)}}
	url := "ws://" + addr + "/ws"
	var ended time.Time // when the last connection ended; zero before the first
	for ctx.Err() == nil {
		dctx, cancel := context.WithTimeout(ctx, IOTimeout)
		c, _, err := websocket.Dial(dctx, url, &websocket.DialOptions{
			HTTPClient: hc, CompressionMode: websocket.CompressionDisabled})
		cancel()
		if ctx.Err() != nil {
			if c != nil {
				_ = c.CloseNow()
			}
			return
		}
		rec.count(&rec.longConns)
		if err != nil {
			rec.longBreak(classify(err), "handshake: "+err.Error())
			SleepCtx(ctx, longPeriod)
			continue
		}
		if !ended.IsZero() {
			rec.reconnected(time.Since(ended))
		}
		longSession(ctx, c, rec)
		ended = time.Now()
	}
}

// longSession sends a numbered message every longPeriod and waits for its
// echo. The connection is:
//   - closed when the server sends a close frame with status 1001 (going
//     away), whether idle or while a message waits for its echo: after its
//     close frame a server sends no more data (RFC 6455 §5.5.1), so a
//     message sent just before it arrived stays unanswered by design;
//   - broken when it ends any other way: a close frame with another status,
//     EOF without a close frame, a reset, a write that fails, an echo that
//     does not come within ioTimeout, or a message that is not the echo of
//     the one sent.
//
// It returns when the connection ended or ctx is done (the client then
// closes with 1000, not counted).
func longSession(ctx context.Context, c *websocket.Conn, rec *Recorder) {
	defer c.CloseNow()
	rctx, stopRead := context.WithCancel(context.Background())
	defer stopRead()
	s := &wsSession{ctx: ctx, c: c, rec: rec, msgs: readMessages(rctx, c)}
	tick := time.NewTicker(longPeriod)
	defer tick.Stop()
	for seq := 1; ; seq++ {
		select {
		case <-ctx.Done():
			_ = c.Close(websocket.StatusNormalClosure, "traffic done")
			return
		case m := <-s.msgs:
			if m.err != nil {
				s.ended(m.err, "")
			} else {
				rec.longBreak(KindLost, fmt.Sprintf("unexpected message %q while idle", m.data))
			}
			return
		case <-tick.C:
		}
		if !s.exchange(strconv.Itoa(seq)) {
			return
		}
	}
}

// wsMsg is one read of a long connection: a message, or how it ended.
type wsMsg struct {
	data []byte
	err  error
}

// readMessages is the one reader of the whole connection, until rctx ends:
// it sees the server's close frame or the connection's end also while the
// client is idle, not only while a message waits for its echo.
func readMessages(rctx context.Context, c *websocket.Conn) <-chan wsMsg {
	msgs := make(chan wsMsg, 1)
	go func() {
		for {
			_, b, err := c.Read(rctx)
			select {
			case msgs <- wsMsg{b, err}:
			case <-rctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return msgs
}

// wsSession is one connection of longSession and what its reader saw.
type wsSession struct {
	ctx  context.Context
	c    *websocket.Conn
	rec  *Recorder
	msgs <-chan wsMsg
}

// ended counts how the connection ended.
func (s *wsSession) ended(err error, waiting string) {
	switch status := websocket.CloseStatus(err); {
	case status == websocket.StatusGoingAway:
		s.rec.count(&s.rec.longClosed)
	case status != -1:
		s.rec.longBreak(KindClose, fmt.Sprintf("close frame with status %d%s", status, waiting))
	case s.ctx.Err() != nil:
	default:
		kind := classify(err)
		if kind == KindEOF || kind == KindError {
			kind = KindNoClose
		}
		s.rec.longBreak(kind, "ended without a close frame"+waiting+": "+err.Error())
	}
}

// exchange sends message want and waits for its echo; false: the
// connection ended (counted) or the traffic is done.
func (s *wsSession) exchange(want string) bool {
	wctx, cancel := context.WithTimeout(s.ctx, IOTimeout)
	err := s.c.Write(wctx, websocket.MessageText, []byte(want))
	cancel()
	if err != nil {
		if s.ctx.Err() != nil {
			return false
		}
		// The reader has the reason when the server closed the
		// connection (a close frame, a reset); give it a moment.
		select {
		case m := <-s.msgs:
			if m.err != nil {
				s.ended(m.err, " (while sending message "+want+")")
				return false
			}
		case <-time.After(100 * time.Millisecond):
		}
		s.rec.longBreak(classify(err), "send message "+want+": "+err.Error())
		return false
	}
	timer := time.NewTimer(IOTimeout)
	defer timer.Stop()
	select {
	case <-s.ctx.Done():
		_ = s.c.Close(websocket.StatusNormalClosure, "traffic done")
		return false
	case m := <-s.msgs:
		switch {
		case m.err != nil:
			s.ended(m.err, " (message "+want+" unanswered)")
			return false
		case string(m.data) != want:
			s.rec.longBreak(KindLost, fmt.Sprintf("sent message %s, got %q back", want, m.data))
			return false
		}
		s.rec.count(&s.rec.exchanges)
		return true
	case <-timer.C:
		s.rec.longBreak(KindLost, fmt.Sprintf("message %s not echoed within %s", want, IOTimeout))
		return false
	}
}
