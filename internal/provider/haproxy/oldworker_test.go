package haproxy

import (
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"zerodrop.dev/zerodrop/internal/model"
)

// socketSwitch stands for the kernel in the moments after a reload, when the
// old worker and the new one both accept on the admin socket: it hands each
// connection to the current HAProxy's admin socket, except the next one
// whose command contains armed's text, which goes to the old one.
type socketSwitch struct {
	path         string
	current, old string
	armed        atomic.Pointer[string]
	toOld        atomic.Int32
}

func startSwitch(t *testing.T, current, old string) *socketSwitch {
	t.Helper()
	s := &socketSwitch{path: filepath.Join(t.TempDir(), "admin.sock"), current: current, old: old}
	ln, err := net.Listen("unix", s.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

// arm sends the next connection whose command contains text to the old
// HAProxy.
func (s *socketSwitch) arm(text string) { s.armed.Store(&text) }

func (s *socketSwitch) serve(c net.Conn) {
	defer c.Close()
	// The provider writes its whole command line, then half-closes.
	cmd, err := io.ReadAll(c)
	if err != nil {
		return
	}
	to := s.current
	if a := s.armed.Load(); a != nil && strings.Contains(string(cmd), *a) && s.armed.CompareAndSwap(a, nil) {
		to = s.old
		s.toOld.Add(1)
	}
	up, err := net.Dial("unix", to)
	if err != nil {
		return
	}
	defer up.Close()
	if _, err := up.Write(cmd); err != nil {
		return
	}
	_ = up.(*net.UnixConn).CloseWrite()
	_, _ = io.Copy(c, up)
}

// TestOldWorkerAnswerIsNotTaken: right after a reload the old worker can
// still take a connection on the admin socket (seen beside stress-ng: a
// reading of the previous configuration, and Apply then failing its
// post-reload check). A reading it answers must not be taken for the
// current one, and a write it takes must not be lost: both reach the worker
// that serves.
func TestOldWorkerAnswerIsNotTaken(t *testing.T) {
	ctx := testContext(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	pA := startOwned(t, dirA, nil)
	pB := startOwned(t, dirB, nil) // the old worker: the previous configuration
	bs := startBackends(t, 3, "127.0.14")
	const key, lbAddr = "default/oldworker", "127.0.0.64"
	current := &model.LoadBalancer{Key: key, Listeners: []model.Listener{listenerOf(key, "tcp-80", lbAddr, freePort(t, lbAddr), bs)}}
	applyDiff(t, pA, current)
	previous := &model.LoadBalancer{Key: key, Listeners: []model.Listener{listenerOf(key, "tcp-80", lbAddr, freePort(t, lbAddr), bs[:2])}}
	applyDiff(t, pB, previous)

	sw := startSwitch(t, filepath.Join(dirA, "admin.sock"), filepath.Join(dirB, "admin.sock"))
	p := attach(t, Options{AdminSocket: sw.path, MasterSocket: filepath.Join(dirA, "master.sock"), ConfigFile: filepath.Join(dirA, "haproxy.cfg")}, nil)

	sw.arm("show stat")
	obs, err := p.Observe(ctx, key)
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	if sw.toOld.Load() != 1 {
		t.Fatalf("the switch sent %d connections to the old HAProxy, want 1", sw.toOld.Load())
	}
	if d := lbDiff(current, obs); d != "" {
		t.Errorf("Observe took the old worker's answer (-current +observed):\n%s", d)
	}

	drained := current.Listeners[0]
	drained.Backends = append([]model.Backend(nil), drained.Backends...)
	drained.Backends[0].State = model.Draining
	want := &model.LoadBalancer{Key: key, Listeners: []model.Listener{drained}}
	sw.arm("set server")
	plan := model.Diff(obs, want)
	if err := p.Apply(ctx, plan); err != nil {
		t.Fatalf("Apply %s: %v", plan, err)
	}
	if sw.toOld.Load() != 2 {
		t.Fatalf("the switch sent %d connections to the old HAProxy, want 2", sw.toOld.Load())
	}
	got, err := pA.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if d := lbDiff(want, got); d != "" {
		t.Errorf("the write went to the old worker and is lost on the current one (-want +current):\n%s", d)
	}
}
