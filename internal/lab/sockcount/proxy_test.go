package sockcount_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"zerodrop.dev/zerodrop/internal/lab/sockcount"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// hookCounts tallies what a Provider's own hooks report, independently of
// the proxy.
type hookCounts struct {
	mu     sync.Mutex
	writes map[string]int // by op, "-" spelled as " " ("set-server" → "set server")
	reads  int
}

func (h *hookCounts) hooks() provider.Hooks {
	return provider.Hooks{
		Write: func(op string) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.writes[strings.ReplaceAll(op, "-", " ")]++
		},
		Read: func(string) { h.mu.Lock(); h.reads++; h.mu.Unlock() },
	}
}

func (h *hookCounts) get() (writes map[string]int, total, reads int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.writes {
		total += n
	}
	return maps.Clone(h.writes), total, h.reads
}

// both sums the counts of the admin and the master proxy.
func both(a, b sockcount.Counts) sockcount.Counts {
	sum := sockcount.Counts{Writes: a.Writes + b.Writes, Reads: a.Reads + b.Reads, WriteVerbs: maps.Clone(a.WriteVerbs),
		DialErrors: a.DialErrors + b.DialErrors}
	for v, n := range b.WriteVerbs {
		sum.WriteVerbs[v] += n
	}
	return sum
}

// startHAProxy starts an HAProxy owned in a fresh directory and returns the
// directory; the HAProxy is stopped when the test ends.
func startHAProxy(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	owner, err := haproxy.New(ctx, haproxy.Options{Dir: dir, StopOnClose: true, ReloadTimeout: 20 * time.Second,
		Log: testr.New(t)})
	if err != nil {
		t.Fatalf("start HAProxy: %v", err)
	}
	t.Cleanup(func() { _ = owner.Close(); testutil.StopHAProxy(t, dir) })
	return dir
}

func listen(t *testing.T, path, target string) *sockcount.Proxy {
	t.Helper()
	p, err := sockcount.Listen(path, target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
	})
	return p
}

// backend is a loopback TCP listener that accepts and closes connections:
// enough for HAProxy's TCP checks.
func backend(t *testing.T, addr string) model.Backend {
	t.Helper()
	ln, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return model.Backend{Address: addr, Port: int32(ln.Addr().(*net.TCPAddr).Port), Weight: model.DefaultWeight, State: model.Active}
}

func freePort(t *testing.T, addr string) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

// TestCountsMatchProviderHooks drives a real HAProxy through the proxies
// with a Provider and checks that the commands counted on the sockets are
// the writes and reads the Provider reported through its hooks.
func TestCountsMatchProviderHooks(t *testing.T) {
	dir := startHAProxy(t)
	// The admin proxy takes the path the configuration names (see
	// Interpose); the master socket is named on HAProxy's command line only,
	// so its proxy can listen anywhere.
	admin, err := sockcount.Interpose(filepath.Join(dir, "admin.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := admin.Close(); err != nil {
			t.Errorf("close admin proxy: %v", err)
		}
	})
	master := listen(t, filepath.Join(t.TempDir(), "master.sock"), filepath.Join(dir, "master.sock"))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := &hookCounts{writes: map[string]int{}}
	p, err := haproxy.New(ctx, haproxy.Options{AdminSocket: admin.Path(), MasterSocket: master.Path(),
		ConfigFile: filepath.Join(dir, "haproxy.cfg"), Hooks: h.hooks(), ReloadTimeout: 20 * time.Second,
		ReadBatchWindow: -1, Log: testr.New(t)})
	if err != nil {
		t.Fatalf("attach through the proxies: %v", err)
	}
	defer p.Close()

	const key, lbAddr = "default/counted", "127.0.0.60"
	bs := []model.Backend{backend(t, "127.0.2.1"), backend(t, "127.0.2.2"), backend(t, "127.0.2.3")}
	port, port2 := freePort(t, lbAddr), freePort(t, lbAddr)
	lb := func(backends []model.Backend, twoListeners bool) *model.LoadBalancer {
		probe := model.Probe{Kind: model.ProbeTCP, IntervalMillis: 300, Rise: 1, Fall: 2}
		l := model.Listener{Name: key + "/tcp-80", Address: lbAddr, Port: port, Protocol: model.TCP, Probe: probe,
			Backends: append([]model.Backend(nil), backends...)}
		out := &model.LoadBalancer{Key: key, Listeners: []model.Listener{l}}
		if twoListeners {
			l2 := l
			l2.Name, l2.Port = key+"/tcp-81", port2
			out.Listeners = append(out.Listeners, l2)
		}
		return out
	}
	apply := func(what string, desired *model.LoadBalancer) {
		t.Helper()
		obs, err := p.Observe(ctx, key)
		if err != nil {
			t.Fatalf("%s: Observe: %v", what, err)
		}
		plan := model.Diff(obs, desired)
		if len(plan.Ops) == 0 {
			t.Fatalf("%s: empty plan", what)
		}
		if err := p.Apply(ctx, plan); err != nil {
			t.Fatalf("%s: Apply %s: %v", what, plan, err)
		}
	}
	apply("create", lb(bs[:2], false))
	apply("add a backend", lb(bs, false))
	weighted := lb(bs, false)
	weighted.Listeners[0].Backends[1].Weight = 40
	apply("change a weight", weighted)
	apply("remove a backend", lb(bs[1:], false))
	apply("add a listener (reload)", lb(bs[1:], true))

	hookWrites, hookTotal, hookReads := h.get()
	got := both(admin.Counts(), master.Counts())
	t.Logf("hooks: writes %v, reads %d; proxies: %+v", hookWrites, hookReads, got)
	for _, verb := range []string{"reload", "add server", "enable health", "set server", "shutdown sessions", "del server"} {
		if hookWrites[verb] == 0 {
			t.Fatalf("the plans made no %q: hook writes %v", verb, hookWrites)
		}
	}
	if got.Writes != hookTotal || !maps.Equal(got.WriteVerbs, hookWrites) {
		t.Errorf("proxies counted %d writes %v; the provider's hooks %d writes %v", got.Writes, got.WriteVerbs, hookTotal, hookWrites)
	}
	// The hooks count a command when the provider sends it; while the master
	// re-executes for a reload its socket refuses connections, and the
	// provider's `show proc` retries never reach it: those the proxy counts
	// as dial errors, not as reads.
	if got.Reads+got.DialErrors != hookReads {
		t.Errorf("proxies counted %d reads and %d unreachable connections; the provider's hooks %d reads", got.Reads, got.DialErrors, hookReads)
	}
	if a := admin.Counts(); a.DialErrors != 0 {
		t.Errorf("%d connections found no HAProxy behind the admin proxy", a.DialErrors)
	}
	if m := master.Counts(); m.WriteVerbs["reload"] != hookWrites["reload"] {
		t.Errorf("master proxy counted reloads %v, hooks %d", m.WriteVerbs, hookWrites["reload"])
	}

	// A read-only Observe writes nothing.
	before := got
	if _, err := p.Observe(ctx, key); err != nil {
		t.Fatal(err)
	}
	after := both(admin.Counts(), master.Counts())
	_, _, readsNow := h.get()
	if after.Writes != before.Writes {
		t.Errorf("Observe made %d writes: %v", after.Writes-before.Writes, after.WriteVerbs)
	}
	if after.Reads == before.Reads || after.Reads+after.DialErrors != readsNow {
		t.Errorf("Observe: proxies counted %d reads (before %d), hooks %d", after.Reads, before.Reads, readsNow)
	}
}

// TestTransparent: prompt mode, a batched line and a long reply behave
// through the proxy as on HAProxy's socket directly.
func TestTransparent(t *testing.T) {
	dir := startHAProxy(t)
	real := filepath.Join(dir, "admin.sock")
	admin := listen(t, filepath.Join(t.TempDir(), "admin.sock"), real)

	// A long reply, read to EOF after a half-close, byte for byte.
	oneShot := func(path, command string) string {
		t.Helper()
		c, err := net.DialTimeout("unix", path, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(c, command); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.UnixConn).CloseWrite()
		reply, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("%q on %s: %v", command, path, err)
		}
		return string(reply)
	}
	direct, proxied := oneShot(real, "help\n"), oneShot(admin.Path(), "help\n")
	if len(direct) < 2000 || proxied != direct {
		t.Fatalf("help through the proxy (%d bytes) differs from direct (%d bytes)", len(proxied), len(direct))
	}
	if got := oneShot(admin.Path(), "show info; show servers state;show info\n"); strings.Count(got, "Pid: ") != 2 {
		t.Fatalf("batched line: reply %q", got)
	}

	// Prompt mode: each command answered, then the prompt, on one connection.
	c, err := net.DialTimeout("unix", admin.Path(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	untilPrompt := func() string {
		t.Helper()
		var b strings.Builder
		for !strings.HasSuffix(b.String(), "\n> ") {
			line, err := r.ReadString(' ')
			b.WriteString(line)
			if err != nil {
				t.Fatalf("prompt mode: %v after %q", err, b.String())
			}
		}
		return b.String()
	}
	fmt.Fprint(c, "prompt\n")
	untilPrompt()
	for i := 0; i < 3; i++ {
		fmt.Fprint(c, "show info\n")
		if got := untilPrompt(); !strings.Contains(got, "Pid: ") {
			t.Fatalf("prompt mode, command %d: %q", i, got)
		}
	}
	fmt.Fprint(c, "quit\n")
	if rest, err := io.ReadAll(r); err != nil || rest != nil && len(rest) != 0 {
		t.Fatalf("after quit: %q, %v", rest, err)
	}

	got := admin.Counts()
	// help, 3 in the batch, prompt, 3 show info, quit.
	if got.Reads != 9 || got.Writes != 0 {
		t.Fatalf("counts %+v, want 9 reads and no write", got)
	}
}

// TestOnWrite: the hook sees each write, and only writes, and holds the
// command from HAProxy until it returns — what the lab's kill-mid-plan relies
// on to stop a writer with its plan's first command landing.
func TestOnWrite(t *testing.T) {
	dir := startHAProxy(t)
	real := filepath.Join(dir, "admin.sock")
	admin := listen(t, filepath.Join(t.TempDir(), "admin.sock"), real)
	oneShot := func(path, command string) string {
		c, err := net.DialTimeout("unix", path, 10*time.Second)
		if err != nil {
			t.Error(err)
			return ""
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprint(c, command)
		reply, err := io.ReadAll(c)
		if err != nil {
			t.Error(err)
		}
		return string(reply)
	}
	maxconn := func() string {
		for _, line := range strings.Split(oneShot(real, "show info\n"), "\n") {
			if v, ok := strings.CutPrefix(line, "Maxconn: "); ok {
				return v
			}
		}
		t.Fatal("no Maxconn in show info")
		return ""
	}
	before := maxconn()
	var seen []string
	entered, release := make(chan struct{}), make(chan struct{})
	admin.OnWrite(func(verb string) {
		seen = append(seen, verb)
		close(entered)
		<-release
	})
	sent := make(chan struct{})
	go func() { defer close(sent); oneShot(admin.Path(), "show info; set maxconn global 1234\n") }()
	<-entered
	// While the hook runs HAProxy has not been sent the command: the
	// client has no reply and maxconn is unchanged.
	select {
	case <-sent:
		t.Fatal("the client had its reply while the hook still ran")
	case <-time.After(2 * time.Second):
	}
	if got := maxconn(); got != before {
		t.Fatalf("while the hook ran HAProxy already had maxconn %s (was %s)", got, before)
	}
	close(release)
	<-sent
	if got := maxconn(); got != "1234" {
		t.Fatalf("after the write HAProxy has maxconn %s, want 1234", got)
	}
	admin.OnWrite(nil)
	oneShot(admin.Path(), "set maxconn global 1235\n")
	if want := []string{"set maxconn"}; !slices.Equal(seen, want) {
		t.Fatalf("hook saw %q, want %q", seen, want)
	}
}

// TestUnreachableAnswers: with no HAProxy behind it, the proxy answers a
// command with its error text, as a reply the client reads, rather than
// closing with the command unread (which resets the client's connection:
// haproxy.WaitStopped took a reset for a live master, and the data-plane
// pods' preStop hooks waited out their grace period in the lab).
func TestUnreachableAnswers(t *testing.T) {
	dir := t.TempDir()
	p := listen(t, filepath.Join(dir, "master.sock"), filepath.Join(dir, "master.sock.haproxy"))
	for i := range 20 {
		c, err := net.Dial("unix", p.Path())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "show proc\n"); err != nil {
			t.Fatalf("connection %d: write: %v", i, err)
		}
		if err := c.(*net.UnixConn).CloseWrite(); err != nil {
			t.Fatalf("connection %d: half-close: %v", i, err)
		}
		reply, err := io.ReadAll(c)
		c.Close()
		if err != nil {
			t.Fatalf("connection %d: read: %v (reply %q)", i, err, reply)
		}
		if !strings.HasPrefix(string(reply), "sockcount: HAProxy socket unreachable") {
			t.Fatalf("connection %d: reply %q", i, reply)
		}
	}
	if got := p.Counts().DialErrors; got != 20 {
		t.Errorf("DialErrors %d, want 20", got)
	}
}
