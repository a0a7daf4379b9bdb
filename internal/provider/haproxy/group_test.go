package haproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// groupOp is one concurrent call of a group test: create key's load
// balancer, or delete it (lb nil).
type groupOp struct {
	key string
	lb  *model.LoadBalancer
}

// runConcurrently starts every op at once while a reload is in progress (the
// test holds p.mu as a reload's leader does), so that the calls queue up
// behind it and then share reloads, as the controller's workers do. It
// returns each op's error.
func runConcurrently(t *testing.T, p *Provider, ops []groupOp) []error {
	t.Helper()
	ctx := testContext(t)
	plans := make([]model.Plan, len(ops))
	for i, op := range ops {
		obs, err := p.Observe(ctx, op.key)
		if err != nil {
			t.Fatalf("Observe %s: %v", op.key, err)
		}
		if op.lb != nil {
			plans[i] = model.Diff(obs, op.lb)
		}
	}
	errs := make([]error, len(ops))
	var wg sync.WaitGroup
	p.mu.Lock()
	for i, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if op.lb == nil {
				errs[i] = p.Delete(ctx, op.key)
			} else {
				errs[i] = p.Apply(ctx, plans[i])
			}
		}()
	}
	// Not a timing assertion: it only lets the calls reach the lock, so
	// that they do queue up behind the "reload".
	time.Sleep(200 * time.Millisecond)
	p.mu.Unlock()
	wg.Wait()
	return errs
}

// TestGroupReload: load balancers created and deleted concurrently share
// reloads (fewer reloads than calls), every created one serves all its
// backends, the deleted one is gone, and a load balancer nobody touched
// keeps serving; when one member's listener cannot be served (its port is
// taken), that member fails alone and the others are served, in fewer
// reloads than members (the refused group is split in halves, not
// reloaded one member at a time).
func TestGroupReload(t *testing.T) {
	cases := []struct {
		name string
		// bad is the index of the op whose port is taken, or -1.
		bad     int
		creates int
	}{
		{name: "all good", bad: -1, creates: 6},
		{name: "one port taken", bad: 9, creates: 16},
	}
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			var c counter
			p := startOwned(t, t.TempDir(), &c)
			bs := startBackends(t, 2, fmt.Sprintf("127.0.%d", 41+ci))
			lbAddr := fmt.Sprintf("127.0.0.%d", 70+ci)
			lb := func(key string, port int32) *model.LoadBalancer {
				return &model.LoadBalancer{Key: key, Listeners: []model.Listener{listenerOf(key, "tcp-80", lbAddr, port, bs)}}
			}
			// Distinct ports for every load balancer of the case: one
			// handed out twice would make a second member fail with the
			// port-taken one.
			ports := freePorts(t, lbAddr, tc.creates+2)
			// Before the group: one load balancer that stays, one that
			// the group deletes.
			stay, gone := lb("default/stay", ports[0]), lb("default/gone", ports[1])
			applyDiff(t, p, stay)
			applyDiff(t, p, gone)

			ops := []groupOp{{key: gone.Key}}
			for i := 0; i < tc.creates; i++ {
				port := ports[i+2]
				if i == tc.bad {
					// A plain listener without SO_REUSEPORT: HAProxy's
					// new worker cannot bind the port.
					ln, err := net.Listen("tcp", net.JoinHostPort(lbAddr, strconv.Itoa(int(port))))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { ln.Close() })
					port = int32(ln.Addr().(*net.TCPAddr).Port)
					t.Logf("default/new-%d: port %d taken", i, port)
				}
				ops = append(ops, groupOp{key: fmt.Sprintf("default/new-%d", i), lb: lb(fmt.Sprintf("default/new-%d", i), port)})
			}
			c.take()
			errs := runConcurrently(t, p, ops)
			writes, _ := c.take()
			reloads := count(writes, "reload")
			t.Logf("%d calls, %d reloads", len(ops), reloads)

			for i, op := range ops {
				isBad := op.lb != nil && i-1 == tc.bad
				switch {
				case isBad && !errors.Is(errs[i], provider.ErrRefused):
					t.Errorf("%s: %v, want provider.ErrRefused: its port is taken", op.key, errs[i])
				case !isBad && errs[i] != nil:
					t.Errorf("%s: %v", op.key, errs[i])
				}
				obs, err := p.Observe(ctx, op.key)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case op.lb == nil || isBad:
					if obs != nil {
						t.Errorf("%s: HAProxy serves %+v, want nothing", op.key, obs)
					}
				default:
					if d := lbDiff(op.lb, obs); d != "" {
						t.Errorf("%s: observed differs (-want +got):\n%s", op.key, d)
					}
				}
			}
			if reloads >= len(ops) {
				t.Errorf("%d concurrent calls made %d reloads, want fewer: they were not grouped, or a refused group was reloaded member by member", len(ops), reloads)
			}
			if t.Failed() {
				return
			}
			// What HAProxy says is what it serves: every backend of every
			// good load balancer answers through it, the untouched one's
			// included (a group reload removes no one's backends).
			for i, op := range append(ops, groupOp{key: stay.Key, lb: stay}) {
				if op.lb == nil || i-1 == tc.bad {
					continue
				}
				l := op.lb.Listeners[0]
				eventually(t, 30*time.Second, op.key+" serving both backends", func() error {
					if seen := reached(t, l.Address, l.Port, 8); len(seen) != 2 {
						return fmt.Errorf("reached %v", seen)
					}
					return nil
				})
			}
			if _, err := get(lbAddr, gone.Listeners[0].Port); err == nil {
				t.Errorf("deleted %s still answers", gone.Key)
			}
			// A fresh Provider (a restarted controller) sees what the group
			// left: nothing to write.
			fresh := attach(t, Options{Dir: p.paths.dir}, nil)
			for _, op := range ops {
				obs, err := fresh.Observe(context.Background(), op.key)
				if err != nil {
					t.Fatal(err)
				}
				if op.lb != nil && obs != nil && !model.Diff(obs, op.lb).Empty() {
					t.Errorf("%s: fresh provider plans %s", op.key, model.Diff(obs, op.lb))
				}
			}
		})
	}
}

// TestGroupMirror: backend changes to many load balancers at once reload
// nothing and share mirrors (fewer `show servers state` reads than one
// Apply alone makes each), and what they did reaches the files: HAProxy
// started cold from them serves every added backend.
func TestGroupMirror(t *testing.T) {
	const n = 6
	ctx := testContext(t)
	dir := t.TempDir()
	var c counter
	p := startOwned(t, dir, &c)
	bs := startBackends(t, 2, "127.0.43")
	const lbAddr = "127.0.0.73"
	var lbs []*model.LoadBalancer
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("default/m-%d", i)
		lb := &model.LoadBalancer{Key: key, Listeners: []model.Listener{listenerOf(key, "tcp-80", lbAddr, freePort(t, lbAddr), bs[:1])}}
		applyDiff(t, p, lb)
		lbs = append(lbs, lb)
	}
	var ops []groupOp
	for _, lb := range lbs {
		l := listenerOf(lb.Key, "tcp-80", lbAddr, lb.Listeners[0].Port, bs)
		ops = append(ops, groupOp{key: lb.Key, lb: &model.LoadBalancer{Key: lb.Key, Listeners: []model.Listener{l}}})
	}
	c.take()
	for _, err := range runConcurrently(t, p, ops) {
		if err != nil {
			t.Fatal(err)
		}
	}
	writes, reads := c.take()
	if r := count(writes, "reload"); r != 0 || count(writes, "add-server") != n {
		t.Fatalf("writes %v: want %d add-server and no reload", writes, n)
	}
	// Alone, each Apply reads the state once to check its version and twice
	// to mirror (render, server-state file): shared, fewer than one each.
	if got := count(reads, "show-servers-state"); got >= n {
		t.Errorf("%d show-servers-state reads for %d Applies: the version checks or the mirrors were not shared", got, n)
	}
	if p.mirrorPending() {
		t.Error("mirror still pending after every Apply succeeded")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	cold := startOwned(t, dir, nil)
	for _, op := range ops {
		obs, err := cold.Observe(ctx, op.key)
		if err != nil {
			t.Fatal(err)
		}
		if d := lbDiff(op.lb, obs); d != "" {
			t.Errorf("%s after a cold start (-want +got):\n%s", op.key, d)
		}
	}
}

// TestGroupCheckSeesOwnWrites: two concurrent Applies for one key, planned
// from the same observation, share the version check's read; the second
// must still see the first one's write and get a conflict, not apply a plan
// made against a state that is gone.
func TestGroupCheckSeesOwnWrites(t *testing.T) {
	p := startOwned(t, t.TempDir(), nil)
	bs := startBackends(t, 3, "127.0.44")
	const key, lbAddr = "default/twice", "127.0.0.74"
	port := freePort(t, lbAddr)
	applyDiff(t, p, &model.LoadBalancer{Key: key, Listeners: []model.Listener{listenerOf(key, "tcp-80", lbAddr, port, bs[:1])}})
	var ops []groupOp
	for _, b := range bs[1:] {
		l := listenerOf(key, "tcp-80", lbAddr, port, []*backendServer{bs[0], b})
		ops = append(ops, groupOp{key: key, lb: &model.LoadBalancer{Key: key, Listeners: []model.Listener{l}}})
	}
	errs := runConcurrently(t, p, ops)
	conflicts := 0
	for _, err := range errs {
		switch {
		case errorsIsConflict(err):
			conflicts++
		case err != nil:
			t.Fatal(err)
		}
	}
	if conflicts != 1 {
		t.Fatalf("errors %v: want exactly one conflict", errs)
	}
}

// TestBackendsShareOldWorkerReadings: many reconciles asking for backend
// status at once (drains in progress on many load balancers) all get it,
// with far fewer master-socket reads than calls; and an old worker that
// holds a connection after a reload is counted at once.
func TestBackendsShareOldWorkerReadings(t *testing.T) {
	const calls = 50
	ctx := testContext(t)
	var c counter
	p := startOwned(t, t.TempDir(), &c)
	bs := startBackends(t, 1, "127.0.45")
	const key, lbAddr = "default/many", "127.0.0.75"
	port := freePort(t, lbAddr)
	l := listenerOf(key, "tcp-80", lbAddr, port, bs)
	applyDiff(t, p, &model.LoadBalancer{Key: key, Listeners: []model.Listener{l}})
	lc := openLongConn(t, lbAddr, port, bs[0].id())
	c.take()
	errs := make(chan error, calls)
	var wg sync.WaitGroup
	for i := 0; i < calls; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := p.Backends(ctx, key)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, reads := c.take(); count(reads, "show-proc") >= calls/2 {
		t.Errorf("%d show-proc reads for %d concurrent Backends calls: not shared", count(reads, "show-proc"), calls)
	}
	// A reload makes the worker holding lc old: its connection still counts.
	l2 := listenerOf(key, "tcp-81", lbAddr, freePort(t, lbAddr), bs)
	applyDiff(t, p, &model.LoadBalancer{Key: key, Listeners: []model.Listener{l, l2}})
	sts, err := p.Backends(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	conns := int64(0)
	for _, st := range sts {
		if st.Listener == l.Name {
			conns += st.Connections
		}
	}
	if conns < 1 {
		t.Errorf("after the reload %s shows %d connections, want the old worker's one (%s)", l.Name, conns, lc.backend)
	}
}

// TestFailNamed: a refusal whose alert says a member's proxy cannot bind
// fails that member alone (not one whose key only starts the same, nor one
// another alert names); one that names none of the members, or every one,
// tells nothing apart.
func TestFailNamed(t *testing.T) {
	const bind = "haproxy: reload failed: [ALERT] (1) : Binding [haproxy.cfg:144] for proxy zd:default.new-10:tcp-80: cannot bind socket (Address already in use)"
	cases := []struct {
		name, refusal string
		keys          []string
		wantFailed    []string
	}{
		{"named", bind, []string{"default/new-1", "default/new-10", "default/new-2"}, []string{"default/new-10"}},
		{"none named", "haproxy: invalid configuration: [ALERT] parsing [haproxy.cfg:12] : unknown keyword", []string{"default/new-1", "default/new-2"}, nil},
		{"named by another alert only", "haproxy: reload failed: [ALERT] (1) : proxy 'zd:default.new-1:tcp-80' has no server available!; " + bind[len("haproxy: reload failed: "):],
			[]string{"default/new-1", "default/new-10"}, []string{"default/new-10"}},
		{"all named", bind, []string{"default/new-10"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var members []*reloadMember
			for _, k := range tc.keys {
				members = append(members, &reloadMember{key: k})
			}
			rest := failNamed(members, errors.New(tc.refusal))
			var failed []string
			for _, m := range members {
				if m.err != nil {
					failed = append(failed, m.key)
				}
			}
			if fmt.Sprint(failed) != fmt.Sprint(tc.wantFailed) || len(rest)+len(failed) != len(members) {
				t.Errorf("failed %v, rest of %d: want %v failed, the others left", failed, len(rest), tc.wantFailed)
			}
		})
	}
}

// TestRefusedReloadsAlone: where HAProxy's alerts cannot be read (a
// data-plane replica attached to the HAProxy of another container), a
// member HAProxy refused is told apart by halves once; when it comes back
// (the controller's retry) beside new members, it reloads alone, so the
// others' group reload is not refused again and split again; deleted, it
// is forgotten. Its listener's address is not on this host, which HAProxy
// refuses at once (a port held by another process is refused before any
// reload: TestHeldPortRefusedWithoutReload).
func TestRefusedReloadsAlone(t *testing.T) {
	var c counter
	p := startOwned(t, t.TempDir(), &c)
	// The master writes on into the unlinked file: nothing to read, as
	// in an attached replica ("(no log)").
	if err := os.Remove(p.paths.log); err != nil {
		t.Fatal(err)
	}
	bs := startBackends(t, 2, "127.0.43")
	const lbAddr = "127.0.0.73"
	lb := func(key string, port int32) *model.LoadBalancer {
		return &model.LoadBalancer{Key: key, Listeners: []model.Listener{listenerOf(key, "tcp-80", lbAddr, port, bs)}}
	}
	// TEST-NET-1 (RFC 5737): never an address of this host.
	bad := &model.LoadBalancer{Key: "default/bad", Listeners: []model.Listener{listenerOf("default/bad", "tcp-80", "192.0.2.73", 8080, bs)}}
	round := func(name string, goods int) (reloads int) {
		ops := []groupOp{{key: "default/bad", lb: bad}}
		for i := 0; i < goods; i++ {
			key := fmt.Sprintf("default/%s-%d", name, i)
			ops = append(ops, groupOp{key: key, lb: lb(key, freePort(t, lbAddr))})
		}
		c.take()
		errs := runConcurrently(t, p, ops)
		writes, _ := c.take()
		for i, op := range ops {
			if bad := i == 0; bad != (errs[i] != nil) || bad && !errors.Is(errs[i], provider.ErrRefused) {
				t.Errorf("%s: %s: %v", name, op.key, errs[i])
			}
		}
		return count(writes, "reload")
	}
	first := round("first", 7)
	second := round("second", 7)
	t.Logf("reloads: %d the first time, %d with the refused member back", first, second)
	// Together they would be refused and split again: at least four
	// reloads for eight members. Alone: the others' one (or two, should
	// the calls fall into two batches) and its own.
	if second > 3 {
		t.Errorf("%d reloads with the refused member back beside 7 new ones, want at most 3: it was reloaded with them", second)
	}
	// Its Service deleted, the refused key, never served, goes without a
	// reload, and is forgotten.
	if err := p.Delete(testContext(t), "default/bad"); err != nil {
		t.Fatalf("Delete of the refused key: %v", err)
	}
	p.mu.Lock()
	kept := p.refused["default/bad"]
	p.mu.Unlock()
	if kept {
		t.Error("the deleted refused key is still kept to reload alone")
	}
}

// TestHeldPortRefusedWithoutReload: a member whose new listener's port
// another process holds is refused (provider.ErrRefused, naming the port)
// without a reload — HAProxy's own refusal would pause every frontend's
// listeners while it retried the bind — and the other members are served
// in one reload. A listener HAProxy already serves is not probed.
func TestHeldPortRefusedWithoutReload(t *testing.T) {
	var c counter
	p := startOwned(t, t.TempDir(), &c)
	bs := startBackends(t, 2, "127.0.44")
	const lbAddr = "127.0.0.74"
	ln, err := net.Listen("tcp", net.JoinHostPort(lbAddr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	taken := int32(ln.Addr().(*net.TCPAddr).Port)
	lb := func(key string, port int32) *model.LoadBalancer {
		return &model.LoadBalancer{Key: key, Listeners: []model.Listener{listenerOf(key, "tcp-80", lbAddr, port, bs)}}
	}
	served := lb("default/served", freePort(t, lbAddr))
	applyDiff(t, p, served)
	ops := []groupOp{{key: "default/bad", lb: lb("default/bad", taken)}}
	for i := 0; i < 3; i++ {
		key := fmt.Sprintf("default/good-%d", i)
		ops = append(ops, groupOp{key: key, lb: lb(key, freePort(t, lbAddr))})
	}
	// The served one changes its backends only: a reload would not bind
	// anything new, and its own port (HAProxy's socket) is not probed.
	changed := *served
	changed.Listeners = []model.Listener{listenerOf("default/served", "tcp-80", lbAddr, served.Listeners[0].Port, bs[:1])}
	ops = append(ops, groupOp{key: "default/served", lb: &changed})
	c.take()
	errs := runConcurrently(t, p, ops)
	writes, _ := c.take()
	for i, op := range ops {
		bad := i == 0
		if bad != (errs[i] != nil) || bad && (!errors.Is(errs[i], provider.ErrRefused) || !strings.Contains(errs[i].Error(), "holds that port")) {
			t.Errorf("%s: %v", op.key, errs[i])
		}
	}
	if n := count(writes, "reload"); n > 2 {
		t.Errorf("%d reloads for 4 good members and one whose port is held; want the good ones' (1, or 2 should the calls fall into two batches), none refused", n)
	}
	if got := observe(t, p, "default/bad"); got != nil && len(got.Listeners) > 0 {
		t.Errorf("the refused member is served: %+v", got)
	}
}
