// Package connguard bounds the connections a listener holds before their
// peers have proven who they are (a TLS handshake with a client
// certificate, a token checked by a handler): an endpoint reachable from a
// pod network must not let anyone who can open TCP connections starve its
// legitimate clients by holding many idle or slowly-handshaking ones.
//
// A connection from Accept is pending until Trust marks it trusted. Pending
// connections are bounded per source address and in all, and may stay
// pending for the Handshake duration only. When a cap is exceeded the
// listener never refuses the newest connection: it closes the oldest
// pending one (of that source for the per-source cap, of all for the
// global cap). A legitimate client authenticates within milliseconds of
// connecting, so it is always among the newest, while a flood's held
// connections are the oldest; and a flood from a few addresses fills its
// own per-source quota only, never evicting another address's connection.
package connguard

import (
	"container/list"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound the pending (accepted but not yet trusted) connections.
type Limits struct {
	// Pending bounds the pending connections from all sources.
	Pending int
	// PendingPerSource bounds the pending connections of one remote IP.
	PendingPerSource int
	// Handshake is how long a connection may stay pending before it is
	// closed.
	Handshake time.Duration
}

func (l Limits) validate() error {
	if l.Pending <= 0 || l.PendingPerSource <= 0 || l.Handshake <= 0 {
		return fmt.Errorf("connguard: limits must all be positive, got pending %d, per source %d, handshake %s",
			l.Pending, l.PendingPerSource, l.Handshake)
	}
	return nil
}

// Reasons a pending connection was closed by the listener, as counted by
// Stats and the metric.
const (
	ReasonSource  = "evicted_source"    // the per-source cap was exceeded
	ReasonGlobal  = "evicted_global"    // the global cap was exceeded
	ReasonExpired = "handshake_timeout" // pending longer than Handshake
)

// Stats counts the connections the listener closed, by reason.
type Stats struct {
	Accepted, Trusted                              uint64
	EvictedSource, EvictedGlobal, ExpiredHandshake uint64
}

// Listener wraps a net.Listener; its Accept returns connections it tracks.
// It is safe for concurrent use.
type Listener struct {
	net.Listener
	lim Limits

	mu      sync.Mutex
	pending list.List             // *Conn, oldest first
	sources map[string]*list.List // remote IP -> its pending *Conn, oldest first

	accepted, trusted, evSource, evGlobal, expired atomic.Uint64
}

// New wraps ln. Limits that are not all positive make every Accept fail
// with a clear error: a guard without bounds guards nothing.
func New(ln net.Listener, lim Limits) *Listener {
	return &Listener{Listener: ln, lim: lim, sources: map[string]*list.List{}}
}

// Conn is a connection from Listener.Accept.
type Conn struct {
	net.Conn
	l   *Listener
	src string

	// Guarded by l.mu: the conn's places in the pending lists (nil once
	// trusted or closed) and its expiry timer.
	all, bySrc *list.Element
	timer      *time.Timer
	trusted    bool

	closeOnce sync.Once
	closeErr  error
}

// Accept waits for the next connection and tracks it as pending; when a
// cap is exceeded the oldest pending connection (of its source, then of
// all) is closed.
func (l *Listener) Accept() (net.Conn, error) {
	if err := l.lim.validate(); err != nil {
		return nil, err
	}
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	src := nc.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(src); err == nil {
		src = host
	}
	c := &Conn{Conn: nc, l: l, src: src}
	l.accepted.Add(1)

	var evict []*Conn
	var reasons []string
	l.mu.Lock()
	c.all = l.pending.PushBack(c)
	q := l.sources[src]
	if q == nil {
		q = list.New()
		l.sources[src] = q
	}
	c.bySrc = q.PushBack(c)
	if q.Len() > l.lim.PendingPerSource {
		old := q.Front().Value.(*Conn)
		l.unlinkLocked(old)
		evict, reasons = append(evict, old), append(reasons, ReasonSource)
	}
	if l.pending.Len() > l.lim.Pending {
		old := l.pending.Front().Value.(*Conn)
		l.unlinkLocked(old)
		evict, reasons = append(evict, old), append(reasons, ReasonGlobal)
	}
	// One timer per pending connection: it is stopped when the connection
	// is trusted or closed, so only held connections pay for it.
	c.timer = time.AfterFunc(l.lim.Handshake, func() { l.expire(c) })
	l.mu.Unlock()

	for i, old := range evict {
		l.count(reasons[i])
		_ = old.closeConn()
	}
	return c, nil
}

func (l *Listener) count(reason string) {
	switch reason {
	case ReasonSource:
		l.evSource.Add(1)
	case ReasonGlobal:
		l.evGlobal.Add(1)
	case ReasonExpired:
		l.expired.Add(1)
	}
}

// unlinkLocked removes c from the pending lists and stops its timer; it
// reports whether c was pending.
func (l *Listener) unlinkLocked(c *Conn) bool {
	if c.all == nil {
		return false
	}
	l.pending.Remove(c.all)
	c.all = nil
	if q := l.sources[c.src]; q != nil {
		q.Remove(c.bySrc)
		if q.Len() == 0 {
			delete(l.sources, c.src)
		}
	}
	c.bySrc = nil
	if c.timer != nil {
		c.timer.Stop()
	}
	return true
}

// expire closes c if it is still pending after the Handshake duration.
func (l *Listener) expire(c *Conn) {
	l.mu.Lock()
	was := l.unlinkLocked(c)
	l.mu.Unlock()
	if was {
		l.count(ReasonExpired)
		_ = c.closeConn()
	}
}

// Stats reports what the listener accepted, trusted and closed.
func (l *Listener) Stats() Stats {
	return Stats{Accepted: l.accepted.Load(), Trusted: l.trusted.Load(), EvictedSource: l.evSource.Load(),
		EvictedGlobal: l.evGlobal.Load(), ExpiredHandshake: l.expired.Load()}
}

// PendingCount is the number of connections pending now.
func (l *Listener) PendingCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending.Len()
}

// Close closes the wrapped listener; connections already accepted stay
// open (as with any net.Listener) and are closed by their users.
func (l *Listener) Close() error { return l.Listener.Close() }

// Close closes the connection (once) and forgets it if it was pending.
func (c *Conn) Close() error {
	c.l.mu.Lock()
	c.l.unlinkLocked(c)
	c.l.mu.Unlock()
	return c.closeConn()
}

func (c *Conn) closeConn() error {
	c.closeOnce.Do(func() { c.closeErr = c.Conn.Close() })
	return c.closeErr
}

// Trust marks c — a connection from Listener.Accept, or a *tls.Conn over
// one — trusted: no longer pending, never evicted or expired. It answers
// false when c is not such a connection or was already closed (evicted or
// expired): its caller must then not serve it.
func Trust(c net.Conn) bool {
	gc := unwrap(c)
	if gc == nil {
		return false
	}
	gc.l.mu.Lock()
	defer gc.l.mu.Unlock()
	if gc.trusted {
		return true
	}
	if !gc.l.unlinkLocked(gc) {
		// Closed while pending: too late.
		return false
	}
	gc.trusted = true
	gc.l.trusted.Add(1)
	return true
}

func unwrap(c net.Conn) *Conn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	gc, _ := c.(*Conn)
	return gc
}

type connKey struct{}

// ConnContext records c in ctx, for http.Server.ConnContext, so that a
// handler can TrustRequest after authenticating the request.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// TrustRequest marks the connection r arrived on trusted (see Trust); the
// server must have set ConnContext. It answers false when it cannot.
func TrustRequest(r *http.Request) bool {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	if c == nil {
		return false
	}
	return Trust(c)
}
