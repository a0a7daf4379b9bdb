package haproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
)

// onlyReach makes n requests, each on a new connection, and fails unless
// every one succeeds and reaches want.
func onlyReach(addr string, port int32, n int, want string) error {
	for i := 0; i < n; i++ {
		body, err := get(addr, port)
		if err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		if body != want {
			return fmt.Errorf("request %d reached %s, want %s", i, body, want)
		}
	}
	return nil
}

// handOver starts two HAProxies, old and new (as a DaemonSet surge does on
// one node), serving the same address and port, each with a backend of its
// own so that an answer names the HAProxy it went through; it returns once
// both have accepted connections, with one long connection held through the
// old one.
func handOver(t *testing.T, oldOpts Options) (oldP *Provider, addr string, port int32, bs []*backendServer, lc *longConn) {
	t.Helper()
	bs = startBackends(t, 2, "127.0.1")
	const key = "default/web"
	addr = "127.0.0.53"
	port = freePort(t, addr)
	lb := func(b *backendServer) *model.LoadBalancer {
		return &model.LoadBalancer{Key: key, Listeners: []model.Listener{listenerOf(key, "tcp-80", addr, port, []*backendServer{b})}}
	}
	oldP = startOwnedWith(t, t.TempDir(), oldOpts)
	applyDiff(t, oldP, lb(bs[0]))
	// The new HAProxy's bind probe binds beside the old listener
	// (SO_REUSEPORT, as HAProxy binds), so the new one takes the port too.
	newP := startOwned(t, t.TempDir(), nil)
	applyDiff(t, newP, lb(bs[1]))
	// Both accept: the kernel spreads new connections over both listeners.
	eventually(t, 60*time.Second, "connections reach both HAProxies", func() error {
		if seen := reached(t, addr, port, 20); len(seen) != 2 {
			return fmt.Errorf("requests reached %v", seen)
		}
		return nil
	})
	lc = openLongConn(t, addr, port, bs[0].id())
	return oldP, addr, port, bs, lc
}

// TestSoftStopHandOver: of two HAProxies on one address and port, the one
// SoftStop stops takes no new connection (all reach the other), keeps
// serving the connection it holds, still reports its backends, refuses a
// reload (which would bind the listeners again), and its master exits when that connection ends:
// WaitStopped returns then, not before.
func TestSoftStopHandOver(t *testing.T) {
	ctx := testContext(t)
	oldP, addr, port, bs, lc := handOver(t, Options{})
	oldDir := oldP.paths.dir
	if _, err := SoftStop(ctx, oldDir); err != nil {
		t.Fatal(err)
	}
	// The old worker closes its listeners on the signal, asynchronously;
	// from then on every new connection reaches the new HAProxy.
	eventually(t, 60*time.Second, "new connections reach only the new HAProxy", func() error {
		return onlyReach(addr, port, 20, bs[1].id())
	})
	if err := onlyReach(addr, port, 40, bs[1].id()); err != nil {
		t.Fatalf("after the old HAProxy stopped listening: %v", err)
	}
	if body, err := lc.request(); err != nil || body != bs[0].id() {
		t.Fatalf("established connection through the stopping HAProxy: %q, %v (want %s)", body, err, bs[0].id())
	}
	// Its backends are still read (the state endpoint answers with them
	// while it drains), through the master CLI: the admin socket is closed.
	if got, err := oldP.Backends(ctx, "default/web"); err != nil || len(got) != 1 || got[0].Address != bs[0].addr {
		t.Fatalf("backends of the stopping HAProxy: %+v, %v; want %s", got, err, bs[0].id())
	}

	// A reload now would start a worker that listens again.
	cfg, err := os.ReadFile(oldP.paths.config)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := os.ReadFile(oldP.paths.meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := oldP.reload(ctx, cfg, meta); !errors.Is(err, ErrStopping) {
		t.Fatalf("reload of a softly stopping HAProxy: %v, want ErrStopping", err)
	}
	if err := onlyReach(addr, port, 40, bs[1].id()); err != nil {
		t.Fatalf("after a reload was asked of the stopping HAProxy: %v", err)
	}

	// The master waits for the held connection.
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := WaitStopped(short, oldDir); err == nil {
		t.Fatal("WaitStopped returned while the stopping HAProxy still held a connection")
	}
	if _, _, _, err := oldP.Procs(ctx); err != nil {
		t.Fatalf("master of the stopping HAProxy: %v", err)
	}
	if body, err := lc.request(); err != nil || body != bs[0].id() {
		t.Fatalf("established connection after the wait: %q, %v", body, err)
	}
	lc.conn.Close()
	if err := WaitStopped(ctx, oldDir); err != nil {
		t.Fatalf("after the last connection closed: %v", err)
	}

	// A container started again in the same pod clears the mark.
	if err := ClearStopping(oldDir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(oldDir, stoppingFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stopping mark after ClearStopping: %v", err)
	}
}

// TestSoftStopHardStopAfter: hard-stop-after bounds the soft stop: the
// master exits with a connection still open, which ends.
func TestSoftStopHardStopAfter(t *testing.T) {
	ctx := testContext(t)
	oldP, addr, port, bs, lc := handOver(t, Options{HardStopAfter: time.Second})
	if _, err := SoftStop(ctx, oldP.paths.dir); err != nil {
		t.Fatal(err)
	}
	if err := WaitStopped(ctx, oldP.paths.dir); err != nil {
		t.Fatalf("with hard-stop-after and a connection held: %v", err)
	}
	if body, err := lc.request(); err == nil {
		t.Fatalf("connection through the stopped HAProxy still answered %q", body)
	}
	if err := onlyReach(addr, port, 20, bs[1].id()); err != nil {
		t.Fatalf("after the old HAProxy stopped: %v", err)
	}
}

const masterReply = "#<PID>          <type>          <reloads>       <uptime>        <version>\n1234            master          0 [failed: 0]   0d00h00m01s     2.6.12\n"

// TestWaitStoppedNotAMaster: what answers the master socket without a
// master's `show proc` (a proxy whose HAProxy is gone) is no master, and a
// missing socket is none; a master that answers is waited for, also when it
// dropped one connection unanswered first (re-executing itself).
func TestWaitStoppedNotAMaster(t *testing.T) {
	ctx := testContext(t)
	for _, tc := range []struct {
		name, reply string
		gone        bool
		// unread: the listener closes each connection without reading
		// the command, so the client's read is reset (ECONNRESET) or its
		// write refused (EPIPE): the lab's counting proxy did so once
		// HAProxy was gone, and both preStop hooks waited out the grace
		// period.
		unread bool
		// unreadFirst: the first connection only is closed unread, as a
		// master that re-executes itself does (HAProxy 2.6's, right after
		// it starts); the next ones get reply.
		unreadFirst bool
	}{
		{name: "closed unread", gone: true, unread: true},
		{name: "proxy, HAProxy gone", reply: "sockcount: HAProxy socket unreachable: connection refused\n", gone: true},
		{name: "closed unanswered", reply: "", gone: true},
		{name: "master", reply: masterReply, gone: false},
		{name: "master re-executing", reply: masterReply, unreadFirst: true, gone: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ln, err := net.Listen("unix", filepath.Join(dir, "master.sock"))
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for n := 0; ; n++ {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					if tc.unread || tc.unreadFirst && n == 0 {
						// Let the command arrive unread, then close.
						time.Sleep(20 * time.Millisecond)
						c.Close()
						continue
					}
					_, _ = io.ReadAll(c)
					_, _ = io.WriteString(c, tc.reply)
					c.Close()
				}
			}()
			short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			if err := WaitStopped(short, dir); (err == nil) != tc.gone {
				t.Fatalf("WaitStopped: %v, want gone=%t", err, tc.gone)
			}
		})
	}
	if err := WaitStopped(ctx, t.TempDir()); err != nil {
		t.Fatalf("no master socket: %v", err)
	}
}
