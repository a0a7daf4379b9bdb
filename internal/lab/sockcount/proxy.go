// Package sockcount is a unix-socket proxy for HAProxy's runtime API that
// counts the commands passing through it: the lab puts one in front of the
// admin stats socket and one in front of the master CLI socket, so the
// provider's writes are counted where they land rather than where the
// provider says it made them.
//
// The proxy forwards bytes unchanged in both directions and propagates
// half-closes (the master CLI answers only once the client has shut down
// its writing side), so a client in prompt mode, a batched "a; b; c" line
// and a long `show stat` reply behave as against HAProxy directly. It only
// reads the client's side to classify commands (see Classify).
package sockcount

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"sync"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
)

// Counts are the commands a Proxy has seen, by kind.
type Counts struct {
	Writes int
	Reads  int
	// WriteVerbs counts the writes by verb ("set server", "add server",
	// "del server", "reload", "enable health", …).
	WriteVerbs map[string]int
	// DialErrors counts client connections the proxy answered with an error
	// and closed because the target socket did not accept a connection (the
	// master CLI refuses them while the master re-executes for a reload):
	// where the client would have failed to connect, it reads that error.
	// Their commands are in neither Writes nor Reads.
	DialErrors int
}

// Proxy accepts connections on a unix socket and forwards each to the
// target socket, counting the runtime API commands sent.
type Proxy struct {
	path   string
	target string
	info   os.FileInfo // the socket file this proxy created
	stop   func()      // netlab.Serve's: ends every connection and waits

	mu     sync.Mutex
	counts Counts
	closed bool

	// aside is where Interpose moved HAProxy's socket; Close moves it back.
	aside string

	onWrite func(verb string) // see OnWrite; under mu
}

// Interpose puts a proxy in place of the HAProxy socket at path: the socket
// file is renamed to path+".haproxy" (HAProxy keeps listening on it: a unix
// socket is bound to the file, not to its name) and the proxy listens at
// path, forwarding there. Close moves HAProxy's socket back.
//
// This is how to count the provider's commands on the admin socket: the
// provider writes the path it dials into HAProxy's configuration (`stats
// socket`), so a proxy at any other path is replaced by HAProxy's own socket
// at the first reload. With the proxy at the configured path, a reload keeps
// it: the new worker inherits the old worker's listening socket for that
// path instead of binding a new one. A cold start of HAProxy would bind it
// anew and bypass the proxy.
func Interpose(path string) (*Proxy, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("sockcount: interpose: %w", err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return nil, fmt.Errorf("sockcount: interpose: %s is not a socket (mode %s)", path, fi.Mode())
	}
	aside := path + ".haproxy"
	if err := os.Rename(path, aside); err != nil {
		return nil, fmt.Errorf("sockcount: interpose: %w", err)
	}
	p, err := Listen(path, aside)
	if err != nil {
		if rerr := os.Rename(aside, path); rerr != nil {
			err = fmt.Errorf("%w (and moving %s back: %v)", err, aside, rerr)
		}
		return nil, err
	}
	p.aside = aside
	return p, nil
}

// Listen creates the socket at path (mode 0600, like HAProxy's: whoever
// connects is an HAProxy administrator) and serves it until Close,
// forwarding every connection to target. path must not exist.
func Listen(path, target string) (*Proxy, error) {
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("sockcount: listen %s: %w", path, os.ErrExist)
	}
	// Bound under a temporary name and renamed once its mode is 0600, so no
	// one can connect while it is still open to all.
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	_ = os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("sockcount: listen %s: %w", path, err)
	}
	// Close removes the file itself, and only when it is still this proxy's:
	// an HAProxy told to bind the same path replaces the file, and removing
	// that one would cut HAProxy off.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("sockcount: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("sockcount: listen %s: %w", path, err)
	}
	info, err := os.Stat(path)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("sockcount: %w", err)
	}
	p := &Proxy{path: path, target: target, info: info, counts: Counts{WriteVerbs: map[string]int{}}}
	p.stop = netlab.Serve(ln, func(c net.Conn, track func(net.Conn) bool) { p.handle(c.(*net.UnixConn), track) })
	return p, nil
}

// OnWrite sets f to be called with each write command's verb as it is
// counted, before the proxy forwards it to HAProxy; nil removes it. f runs
// on the connection's goroutine and holds that command until it returns: the
// lab's chaos scenarios kill the writer from f, so the process dies with its
// plan's first command landing and the rest of the plan unsent.
func (p *Proxy) OnWrite(f func(verb string)) {
	p.mu.Lock()
	p.onWrite = f
	p.mu.Unlock()
}

// Path is the socket the proxy listens on.
func (p *Proxy) Path() string { return p.path }

// Counts returns the totals so far.
func (p *Proxy) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.counts
	c.WriteVerbs = maps.Clone(p.counts.WriteVerbs)
	return c
}

// InPlace reports whether the socket file at Path is still the proxy's: a
// cold start of HAProxy binding the path again replaces it, and commands
// from then on bypass the proxy and are not counted.
func (p *Proxy) InPlace() bool {
	info, err := os.Stat(p.path)
	return err == nil && os.SameFile(info, p.info)
}

// Landed sums the writes the proxies counted, and fails when one of them
// was bypassed (InPlace false): writes after that were not counted.
func Landed(proxies []*Proxy) (int64, error) {
	var n int64
	for _, p := range proxies {
		if !p.InPlace() {
			return 0, fmt.Errorf("HAProxy's socket %s was replaced: writes after that were not counted", p.Path())
		}
		n += int64(p.Counts().Writes)
	}
	return n, nil
}

// Close stops accepting, cuts the connections in progress, waits for their
// goroutines and removes the socket file.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.stop()
	var err error
	info, serr := os.Stat(p.path)
	ours := serr == nil && os.SameFile(info, p.info)
	if ours {
		err = os.Remove(p.path)
	}
	if p.aside != "" && (ours || errors.Is(serr, os.ErrNotExist)) {
		if rerr := os.Rename(p.aside, p.path); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		return fmt.Errorf("sockcount: close %s: %w", p.path, err)
	}
	return nil
}

// handle forwards one client's connection to HAProxy's socket; netlab.Serve
// closes both when it returns.
func (p *Proxy) handle(client *net.UnixConn, track func(net.Conn) bool) {
	server, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: p.target, Net: "unix"})
	if err != nil {
		// Nothing the client sends reaches HAProxy, so nothing is counted.
		// The client gets an error text rather than a bare close: an empty
		// reply is how HAProxy says a write succeeded (set server, reload).
		p.mu.Lock()
		p.counts.DialErrors++
		p.mu.Unlock()
		// Read the command first (until the client's half-close, or a
		// second): closing with it unread resets the connection, and the
		// client reads ECONNRESET instead of this answer.
		_ = client.SetDeadline(time.Now().Add(time.Second))
		_, _ = io.Copy(io.Discard, client)
		_ = client.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = fmt.Fprintf(client, "sockcount: HAProxy socket unreachable: %v\n", err)
		return
	}
	if !track(server) {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// HAProxy → client, unchanged; HAProxy's end of the reply (or of the
		// session) becomes the client's EOF.
		_, _ = io.Copy(client, server)
		_ = client.CloseWrite()
	}()
	p.forward(client, server)
	<-done
}

// forward copies client → HAProxy. Each chunk is classified before it is
// sent, so a command is counted before HAProxy can answer it: a client that
// has its reply sees the command in Counts.
func (p *Proxy) forward(client, server *net.UnixConn) {
	s := splitter{emit: p.count}
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			s.write(buf[:n])
			if _, werr := server.Write(buf[:n]); werr != nil {
				// HAProxy closed the session (quit, reload): what the client
				// sends afterwards never runs.
				_ = server.Close()
				return
			}
		}
		if err != nil {
			if err == io.EOF {
				s.flush()
			}
			_ = server.CloseWrite()
			return
		}
	}
}

func (p *Proxy) count(command string) {
	verb, write, ok := Classify(command)
	if !ok {
		return
	}
	p.mu.Lock()
	if write {
		p.counts.Writes++
		p.counts.WriteVerbs[verb]++
	} else {
		p.counts.Reads++
	}
	f := p.onWrite
	p.mu.Unlock()
	if write && f != nil {
		f(verb)
	}
}

// OnWriteAll makes f watch the writes at every one of proxies (OnWrite);
// nil: no more.
func OnWriteAll(proxies []*Proxy, f func(verb string)) {
	for _, p := range proxies {
		p.OnWrite(f)
	}
}
