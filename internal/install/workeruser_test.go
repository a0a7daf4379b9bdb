package install

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// TestChartHAProxyWorkersNotRoot starts the data plane's HAProxy the way its
// container does — the production `zerodrop haproxy` binary with the
// rendered container's arguments, as root with exactly the container's
// capabilities and no privilege escalation (setpriv plays the container
// runtime) — and writes it through its Provider as the replica does: a
// Service on port 80 of a loopback address is served, HAProxy's workers run
// with no root uid or gid (real, effective, saved, filesystem) while its
// master stays root (it binds the listeners), and a reload (a second
// listener) keeps port 80 served without a failed connection, its new worker
// is not root either, and the old worker stops (the master may signal it).
func TestChartHAProxyWorkersNotRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the data plane's HAProxy starts as root to bind ports below 1024")
	}
	ds := typed[appsv1.DaemonSet](t, find(t, render(t, haproxyValues...), "DaemonSet", "zerodrop-data-plane"))
	hc := ds.Spec.Template.Spec.Containers[0]
	if hc.Name != "haproxy" {
		t.Fatalf("first data-plane container %q: want haproxy", hc.Name)
	}
	bin := zerodropBinary(t)
	dir := filepath.Join(t.TempDir(), "haproxy")
	t.Cleanup(func() { testutil.StopHAProxy(t, dir) })
	runHAProxyContainer(t, hc, bin, dir)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	admin, master, config, err := haproxy.Paths(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := haproxy.New(ctx, haproxy.Options{AdminSocket: admin, MasterSocket: master, ConfigFile: config,
		Log: testr.New(t), ReloadTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })

	backend := httpBackend(t)
	const key, addr = "default/web", "127.0.147.80"
	l80 := model.Listener{Name: key + "/http", Address: addr, Port: 80, Protocol: model.TCP,
		Probe:    model.Probe{Kind: model.ProbeTCP, IntervalMillis: 300, Rise: 1, Fall: 2},
		Backends: []model.Backend{backend}}
	apply(ctx, t, p, &model.LoadBalancer{Key: key, Listeners: []model.Listener{l80}})
	testutil.Eventually(t, 30*time.Second, "port 80 served", func() (bool, string) {
		err := getOK(&http.Client{Timeout: 2 * time.Second}, fmt.Sprintf("http://%s:80/", addr))
		return err == nil, fmt.Sprint(err)
	})
	masterPID, workers, _, err := p.Procs(ctx)
	if err != nil || len(workers) != 1 {
		t.Fatalf("show proc: workers %v, err %v", workers, err)
	}
	if ids := procIDs(t, masterPID); ids["Uid"] != "0 0 0 0" {
		t.Errorf("master %d runs as uid %q: want root (it binds the listeners and reloads)", masterPID, ids["Uid"])
	}
	notRoot(t, workers[0])

	// A reload (a new listener is a new configuration) while a client
	// opens a new connection to port 80 every 20 ms.
	stop := make(chan struct{})
	type result struct {
		n      int
		failed []string
	}
	results := make(chan result, 1)
	go func() {
		n, failed := hammer(fmt.Sprintf("http://%s:80/", addr), stop)
		results <- result{n, failed}
	}()
	l81 := l80
	l81.Name, l81.Port = key+"/alt", 81
	apply(ctx, t, p, &model.LoadBalancer{Key: key, Listeners: []model.Listener{l80, l81}})
	_, now, _, err := p.Procs(ctx)
	if err != nil || len(now) != 1 || now[0] == workers[0] {
		t.Fatalf("after the reload: workers %v (before %d), err %v; want one new worker", now, workers[0], err)
	}
	time.Sleep(500 * time.Millisecond) // traffic to the new worker too
	close(stop)
	res := <-results
	if len(res.failed) > 0 {
		t.Errorf("%d of %d connections to port 80 failed across the reload, first: %s", len(res.failed), res.n, res.failed[0])
	}
	t.Logf("%d connections to port 80 across the reload, %d failed", res.n, len(res.failed))
	notRoot(t, now[0])
	testutil.Eventually(t, 30*time.Second, "the old worker to stop", func() (bool, string) {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", workers[0]))
		_, _, old, perr := p.Procs(ctx)
		return os.IsNotExist(err) && len(old) == 0 && perr == nil, fmt.Sprintf("old workers %v, err %v", old, perr)
	})
	for _, port := range []int{80, 81} {
		if err := getOK(&http.Client{Timeout: 5 * time.Second}, fmt.Sprintf("http://%s:%d/", addr, port)); err != nil {
			t.Errorf("port %d after the reload: %v", port, err)
		}
	}
}

// TestChartHAProxyWorkerUserNeedsCapabilities: without the capabilities the
// master needs to run its workers as another user (the chart's haproxy
// container before they were added: NET_BIND_SERVICE only), `zerodrop
// haproxy` refuses to start HAProxy and says which are missing, instead of
// workers that exit at once or old workers that never stop.
func TestChartHAProxyWorkerUserNeedsCapabilities(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	bin := zerodropBinary(t)
	dir := filepath.Join(t.TempDir(), "haproxy")
	t.Cleanup(func() { testutil.StopHAProxy(t, dir) })
	cmd := exec.Command("setpriv", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all,+net_bind_service",
		bin, "haproxy", "--dir="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	ended := testutil.StartGroup(t, cmd)
	var err error
	select {
	case <-ended:
	case <-time.After(60 * time.Second):
		// It started HAProxy instead of refusing: stop it all.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-ended
		err = errors.New("still running after 60 s")
	}
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 || !strings.Contains(out.String(), "lacks KILL, SETGID, SETUID") {
		t.Fatalf("zerodrop haproxy with NET_BIND_SERVICE only: %v\n%s\nwant exit 1 naming the missing KILL, SETGID, SETUID", err, out.String())
	}
}

// zerodropBinary is the production binary (the images' /zerodrop), built
// once for the package's tests (TestMain removes it).
func zerodropBinary(t *testing.T) string {
	t.Helper()
	builtOnce.Do(func() {
		dir, err := os.MkdirTemp("", "zerodrop-install-test-")
		if err != nil {
			builtErr = err
			return
		}
		builtDir = dir
		bin := filepath.Join(dir, "zerodrop")
		if out, err := exec.Command("go", "build", "-o", bin, "zerodrop.dev/zerodrop/cmd/zerodrop").CombinedOutput(); err != nil {
			builtErr = fmt.Errorf("go build zerodrop: %v\n%s", err, out)
			return
		}
		builtBin = bin
	})
	if builtErr != nil {
		t.Fatal(builtErr)
	}
	return builtBin
}

var (
	builtOnce          sync.Once
	builtDir, builtBin string
	builtErr           error
)

// TestMain removes the binary zerodropBinary built.
func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// runHAProxyContainer runs container c of the chart (the data plane's haproxy) from
// bin as a container runtime would as far as users and capabilities go: as
// root (c must ask for uid 0), with the capabilities it adds after dropping
// ALL as its only ones (bounding set), and no_new_privs when it allows no
// privilege escalation. Its state volume is dir.
func runHAProxyContainer(t *testing.T, c corev1.Container, bin, dir string) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Fatalf("container %s securityContext %+v: this test runs a root container that drops ALL capabilities", c.Name, sc)
	}
	caps := "-all"
	for _, c := range sc.Capabilities.Add {
		caps += ",+" + strings.ToLower(string(c))
	}
	args := []string{"--inh-caps=-all", "--bounding-set=" + caps}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		args = append(args, "--no-new-privs")
	}
	if len(c.Command) != 1 || c.Command[0] != "/zerodrop" || len(c.Args) == 0 || c.Args[0] != "haproxy" {
		t.Fatalf("container %s runs %q %q: want /zerodrop haproxy", c.Name, c.Command, c.Args)
	}
	args = append(args, bin)
	mount := ""
	for _, m := range c.VolumeMounts {
		if m.Name == "state" {
			mount = m.MountPath
		}
	}
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--dir="); ok {
			rel, err := filepath.Rel(mount, v)
			if mount == "" || err != nil || strings.HasPrefix(rel, "..") {
				t.Fatalf("--dir %s is not on the state volume (%q)", v, mount)
			}
			a = "--dir=" + dir
		}
		args = append(args, a)
	}
	cmd := exec.Command("setpriv", args...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	// Registered first, so it runs after StartGroup's cleanup has killed
	// the process and its output is complete.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("haproxy container output:\n%s", log.String())
		}
	})
	testutil.StartGroup(t, cmd)
}

// httpBackend serves 200 on a free port of 127.0.0.1 until the test ends.
func httpBackend(t *testing.T) model.Backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return model.Backend{Address: "127.0.0.1", Port: int32(ln.Addr().(*net.TCPAddr).Port), Weight: model.DefaultWeight, State: model.Active}
}

// apply writes want through p as the replica does (the difference from what
// HAProxy serves).
func apply(ctx context.Context, t *testing.T, p *haproxy.Provider, want *model.LoadBalancer) {
	t.Helper()
	obs, err := p.Observe(ctx, want.Key)
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	if err := p.Apply(ctx, model.Diff(obs, want)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

// hammer GETs url on a new connection every 20 ms until stop is closed (at
// most 3000 times) and returns how many it made and the failures.
func hammer(url string, stop <-chan struct{}) (n int, failed []string) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for n = 0; n < 3000; n++ {
		select {
		case <-stop:
			return n, failed
		case <-time.After(20 * time.Millisecond):
		}
		if err := getOK(c, url); err != nil {
			failed = append(failed, err.Error())
		}
	}
	return n, append(failed, "still running after 3000 requests")
}

// procIDs are the Uid and Gid lines of /proc/PID/status (real, effective,
// saved, filesystem), and Groups.
func procIDs(t *testing.T, pid int) map[string]string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		if k == "Uid" || k == "Gid" || k == "Groups" {
			out[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return out
}

// notRoot fails unless process pid has no root uid or gid, real or
// effective (or saved, or filesystem), and no supplementary group 0.
func notRoot(t *testing.T, pid int) {
	t.Helper()
	ids := procIDs(t, pid)
	for _, k := range []string{"Uid", "Gid"} {
		f := strings.Fields(ids[k])
		if len(f) != 4 {
			t.Fatalf("worker %d: %s %q", pid, k, ids[k])
		}
		for _, id := range f {
			if id == "0" {
				t.Errorf("HAProxy worker %d: %s %s (real effective saved filesystem): want no root", pid, k, ids[k])
				break
			}
		}
	}
	for _, g := range strings.Fields(ids["Groups"]) {
		if g == "0" {
			t.Errorf("HAProxy worker %d: supplementary groups %s include root's", pid, ids["Groups"])
		}
	}
}
