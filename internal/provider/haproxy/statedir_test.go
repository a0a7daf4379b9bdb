package haproxy

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"

	"zerodrop.dev/zerodrop/internal/model"
)

// nobody is a uid (and gid) that is not the test's: tests run as root.
const nobody = 65534

// refusedDir asserts that New refuses dir with an error that says want, and
// stops the HAProxy that a New which wrongly accepted it started.
func refusedDir(t *testing.T, dir, want string) {
	t.Helper()
	p, err := New(testContext(t), Options{Dir: dir, StopOnClose: true, Log: testr.New(t)})
	if err == nil {
		stopAll(t, p)
		t.Fatalf("New accepted state dir %s, want an error saying %q", dir, want)
	}
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("error %q does not name %s and say %q", err, dir, want)
	}
}

func TestStateDirCreatedPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	startOwned(t, dir, nil)
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Fatalf("state dir created with mode %o, want 700", perm)
	}
}

func TestStateDirWorldWritableRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	refusedDir(t, dir, "writable by others")
}

func TestStateDirOfAnotherOwnerRefused(t *testing.T) {
	if os.Geteuid() == nobody {
		t.Skip("runs as the uid the test gives the directory")
	}
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, nobody, nobody); err != nil {
		t.Skipf("cannot give the directory to another uid: %v", err)
	}
	refusedDir(t, dir, "owned by uid 65534")
}

// TestForeignMasterSocketRefused: a master socket in the state dir that
// someone else owns is not attached to (nor replaced).
func TestForeignMasterSocketRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "master.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if err := os.Chown(sock, nobody, nobody); err != nil {
		t.Skipf("cannot give the socket to another uid: %v", err)
	}
	refusedDir(t, dir, "master.sock is owned by uid 65534")
}

// TestPlantedTempFileNotFollowed: symlinks planted under the names the
// provider once wrote through (<file>.tmp) are neither followed nor
// replaced; the configuration is written all the same.
func TestPlantedTempFileNotFollowed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	const content = "not HAProxy's\n"
	if err := os.WriteFile(victim, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	planted := []string{"haproxy.cfg.tmp", "listeners.map.tmp", "server-state.tmp", "haproxy.cfg.new.tmp", "listeners.map.new.tmp"}
	for _, name := range planted {
		if err := os.Symlink(victim, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	p := startOwned(t, dir, nil)
	bs := startBackends(t, 2, "127.0.11")
	const key, lbAddr = "default/planted", "127.0.0.61"
	l := listenerOf(key, "tcp-80", lbAddr, freePort(t, lbAddr), bs[:1])
	desired := &model.LoadBalancer{Key: key, Listeners: []model.Listener{l}}
	applyDiff(t, p, desired) // a reload: configuration, map, candidates
	l.Backends = append(l.Backends, bs[1].backend())
	desired.Listeners = []model.Listener{l}
	applyDiff(t, p, desired) // at run time, mirrored: server state too

	if got, err := os.ReadFile(victim); err != nil || string(got) != content {
		t.Fatalf("the symlinks' target was written (%v): %q", err, got)
	}
	for _, name := range planted {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("planted %s replaced or removed (%v)", name, err)
		}
	}
	for _, name := range []string{"haproxy.cfg", "listeners.map", "server-state"} {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s is not a regular file (%v)", name, err)
		}
	}
	cfg, err := os.ReadFile(p.ConfigFile())
	if err != nil || !strings.Contains(string(cfg), serverName(bs[1].addr, bs[1].port)) {
		t.Fatalf("configuration without the server added at run time (%v):\n%s", err, cfg)
	}
}
