package dataplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/sockcount"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// HAProxyChild is cluster.ChildEnv's value for a replica's `zerodrop
// haproxy` (and the validator it starts): a test binary standing in for
// the zerodrop binary runs the command in its TestMain.
const HAProxyChild = "haproxy"

// startHAProxy starts replica d's HAProxy as the chart's haproxy container
// runs it: `zerodrop haproxy --dir DIR` in the replica's host namespace,
// which prepares the state directory, starts the validator the replica's
// zerodrop process checks each configuration with
// (--haproxy-validate-socket), and becomes HAProxy's master. Its `haproxy`
// is the distribution's behind the lab's wrapper, which moves the master
// CLI socket behind the lab's counting proxy (in place before HAProxy
// starts); the admin socket's proxy takes its path once HAProxy made it.
// The lab then attaches its view of that HAProxy (d.prov), as the chart
// world does.
func (p *Plane) startHAProxy(ctx context.Context, d *Replica) error {
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return err
	}
	wrapper := d.dir + ".sh"
	if err := cluster.WriteImageHAProxyWrapper(wrapper); err != nil {
		return err
	}
	master, err := sockcount.Listen(filepath.Join(d.dir, "master.sock"), filepath.Join(d.dir, "master.sock.haproxy"))
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.socks = append(d.socks, master)
	d.mu.Unlock()
	p.addSocks(master)

	logPath := filepath.Join(p.cfg.LogDir, fmt.Sprintf("data-plane-%d-%d-%d-haproxy.log", p.cfg.RunID, d.index, d.gen))
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	// env(1) sets ChildEnv and execs; `zerodrop haproxy` then execs
	// HAProxy: the process keeps its PID, HAProxy's master.
	proc, err := p.cfg.Net.Net.Start(d.host.Netns, f, f, "env", cluster.ChildEnv+"="+HAProxyChild, p.cfg.Executable,
		"haproxy", "--dir="+d.dir, "--binary="+wrapper)
	f.Close()
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.hproc = proc
	d.mu.Unlock()

	exited := func() string {
		if proc.Exited() {
			return "exited (log " + logPath + ")"
		}
		return ""
	}
	return p.attachView(ctx, d, filepath.Join(d.dir, "admin.sock"), fmt.Sprintf("data-plane replica %d's HAProxy admin socket", d.index), exited)
}

// attachView waits until HAProxy has made its admin socket sock (while
// exited, when set, says nothing: why HAProxy cannot), interposes the
// counting proxy there and attaches the lab's view of replica d's HAProxy
// (d.prov), which never starts or stops it. Both worlds of replicas: the
// lab's own (startHAProxy) and the chart's (beforeController).
func (p *Plane) attachView(ctx context.Context, d *Replica, sock, what string, exited func() string) error {
	if err := traffic.WaitFor(ctx, 60*time.Second, what, func() (bool, string) {
		if exited != nil {
			if why := exited(); why != "" {
				return false, why
			}
		}
		fi, err := os.Lstat(sock)
		return err == nil && fi.Mode().Type() == os.ModeSocket, "not there yet"
	}); err != nil {
		return err
	}
	admin, err := sockcount.Interpose(sock)
	if err != nil {
		return err
	}
	p.addSocks(admin)
	d.mu.Lock()
	dir := d.dir
	d.socks = append(d.socks, admin)
	d.mu.Unlock()
	prov, err := haproxy.New(ctx, haproxy.Options{AdminSocket: sock, MasterSocket: filepath.Join(dir, "master.sock"),
		ConfigFile: filepath.Join(dir, "haproxy.cfg"), Log: logr.Discard()})
	if err != nil {
		return fmt.Errorf("data-plane replica %d: attach to its HAProxy: %w", d.index, err)
	}
	d.mu.Lock()
	d.prov, d.viewedAt = prov, time.Now()
	d.mu.Unlock()
	return nil
}

// stopHAProxy stops replica d's HAProxy: its master (SIGTERM to the
// process group, the workers with it), and releases the lab's view. An old
// worker the master no longer lists (a run with hundreds of reloads,
// connections to vanished pods held for the server timeout) would outlive
// it: the lab ends every process of that HAProxy, by the configuration
// file on its command line.
func (p *Plane) stopHAProxy(d *Replica) error {
	d.mu.Lock()
	proc, prov := d.hproc, d.prov
	d.mu.Unlock()
	if proc != nil {
		_ = proc.Stop()
	}
	if n := cluster.KillByArg(filepath.Join(d.dir, "haproxy.cfg")); n > 0 {
		p.cfg.Logf("%s: killed %d HAProxy processes of %s left after the master stopped", p.cfg.Name, n, d.dir)
	}
	if prov != nil {
		return prov.Close()
	}
	return nil
}
