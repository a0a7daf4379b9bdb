package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/go-logr/logr"

	"zerodrop.dev/zerodrop/internal/lab/sockcount"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// writeHAProxyWrapper writes the wrapper at path, for HAProxy in the
// namespace netns.
func WriteHAProxyWrapper(path, netns string) error {
	return os.WriteFile(path, []byte(HAProxyWrapper("ip netns exec "+netns+" haproxy")), 0o755)
}

// WriteImageHAProxyWrapper writes at path the `haproxy` of the lab's
// data-plane image: the distribution's HAProxy (found on PATH) behind the
// lab's wrapper, which moves the master CLI socket to where the lab's
// counting proxy forwards.
func WriteImageHAProxyWrapper(path string) error {
	real, err := exec.LookPath("haproxy")
	if err != nil {
		return fmt.Errorf("haproxy: %w (hack/setup-haproxy.sh installs it)", err)
	}
	return os.WriteFile(path, []byte(HAProxyWrapper(ShellQuote(real))), 0o755)
}

// haproxyWrapper is a shell script that runs command with its arguments,
// the master CLI socket's (`-S PATH,…`) moved to PATH.haproxy; a path
// already moved (a reload running the wrapper again) is left alone.
func HAProxyWrapper(command string) string {
	return `#!/bin/sh
prev=
for a do
	shift
	if [ "$prev" = "-S" ]; then
		case "$a" in
		*.haproxy|*.haproxy,*) ;;
		*,*) a="${a%%,*}.haproxy,${a#*,}" ;;
		*) a="$a.haproxy" ;;
		esac
	fi
	prev="$a"
	set -- "$@" "$a"
done
exec ` + command + ` "$@"
`
}

// KillByArg sends SIGKILL to every process with arg on its command line and
// waits (up to 5 s) until they are gone; it returns how many it found.
func KillByArg(arg string) int {
	return supervisor.KillMatching(func(args []string) bool { return slices.Contains(args, arg) }, 5*time.Second)
}

// startHAProxy starts the HAProxy of dir through wrapper (haproxyBinary),
// with the lab's counting proxies in front of its runtime API sockets:
// writes are counted where they land. The master's is in place before
// HAProxy starts (see haproxyBinary); the admin socket's takes the path
// HAProxy's configuration names, which reloads keep. The proxies made are
// returned also on error, for the caller to close.
func StartHAProxy(ctx context.Context, dir, wrapper string) (*haproxy.Provider, []*sockcount.Proxy, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	master, err := sockcount.Listen(filepath.Join(dir, "master.sock"), filepath.Join(dir, "master.sock.haproxy"))
	if err != nil {
		return nil, nil, err
	}
	socks := []*sockcount.Proxy{master}
	// ReloadTimeout above its 10 s default, as the provider's own tests
	// set it: the bound covers the configuration check (`haproxy -c`, here
	// through `ip netns exec`), and the lab shares its 2 cores with make
	// test's other line, whose compiles once held a check at start past
	// 10 s. It bounds failures only; no lab figure is a reload's time.
	prov, err := haproxy.New(ctx, haproxy.Options{Dir: dir, Binary: wrapper, StopOnClose: true, Log: logr.Discard(),
		ReloadTimeout: 30 * time.Second})
	if err != nil {
		return nil, socks, err
	}
	admin, err := sockcount.Interpose(filepath.Join(dir, "admin.sock"))
	if err != nil {
		_ = prov.Close()
		return nil, socks, err
	}
	return prov, append(socks, admin), nil
}
