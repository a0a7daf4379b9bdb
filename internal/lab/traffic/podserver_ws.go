package traffic

import (
	"context"
	"net"
	"net/http"
	"sync"

	"github.com/coder/websocket"
)

// wsConn is one WebSocket a pod serves.
type wsConn struct {
	c    *websocket.Conn
	nc   net.Conn // the TCP connection under it, for the kill's reset
	peer string   // the address the connection came from (r.RemoteAddr)

	mu      sync.Mutex // held while an echo is written
	closing bool       // goAway began: no more echoes
}

// wsEcho serves /ws: it echoes every message until the connection ends. A
// message read before the pod began to go away is echoed before the close
// frame goes out; one read after it is not (the close frame is the
// server's last word, RFC 6455 §5.5.1).
func (s *PodServer) wsEcho(w http.ResponseWriter, r *http.Request) {
	nc, _ := r.Context().Value(netConnKey{}).(net.Conn)
	// Which host the connection came from (the data-plane replica it
	// went through), for the client's TimedConn.Peer.
	w.Header().Set(PeerHeader, r.RemoteAddr)
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return // Accept answered the client
	}
	wc := &wsConn{c: c, nc: nc, peer: r.RemoteAddr}
	s.mu.Lock()
	if s.closing.Load() {
		// Accepted on a connection that was open when SIGTERM came.
		s.mu.Unlock()
		wc.goAway()
		return
	}
	s.ws[wc] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.ws, wc)
		s.mu.Unlock()
		_ = c.CloseNow()
	}()
	for {
		typ, b, err := c.Read(context.Background())
		if err != nil {
			return
		}
		wc.mu.Lock()
		if !wc.closing {
			err = c.Write(context.Background(), typ, b)
		}
		wc.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// goAway is the pod's SIGTERM for a WebSocket: a close frame with status
// 1001 (going away), then the close handshake (the library waits up to 5 s
// for the client's close frame) and the connection's end.
func (wc *wsConn) goAway() {
	wc.mu.Lock()
	wc.closing = true
	wc.mu.Unlock()
	_ = wc.c.Close(websocket.StatusGoingAway, "pod shutting down")
}

// WebSocketPeers lists the address each open WebSocket came from (ip:port),
// the data-plane host's or a node's (kube-proxy's masquerade), so the lab
// can tell which node a connection entered by.
func (s *PodServer) WebSocketPeers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.ws))
	for wc := range s.ws {
		out = append(out, wc.peer)
	}
	return out
}
