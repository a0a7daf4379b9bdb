package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// haproxyBinary is a wrapper that runs HAProxy in the load balancer's
// namespace: the lab starts it there, and a reload through the master CLI
// re-executes the master in the namespace it already has. It also moves the
// master CLI socket (`-S PATH,…`) to PATH.haproxy, where the lab's counting
// proxy at PATH forwards: a reload binds the master socket again by the path
// on its command line, so a proxy put in its place afterwards would be
// replaced at the first reload.
func (r *run) haproxyBinary() string {
	return filepath.Join(r.lab.dir, fmt.Sprintf("haproxy-%d.sh", r.id))
}

// writeHAProxyWrapper writes the wrapper at path, for HAProxy in the
// namespace netns.
func writeHAProxyWrapper(path, netns string) error {
	script := `#!/bin/sh
prev=
for a do
	shift
	if [ "$prev" = "-S" ]; then
		case "$a" in
		*,*) a="${a%%,*}.haproxy,${a#*,}" ;;
		*) a="$a.haproxy" ;;
		esac
	fi
	prev="$a"
	set -- "$@" "$a"
done
exec ip netns exec ` + netns + ` haproxy "$@"
`
	return os.WriteFile(path, []byte(script), 0o755)
}

// killByArg sends SIGKILL to every process with arg on its command line and
// waits (up to 5 s) until they are gone; it returns how many it found.
func killByArg(arg string) int {
	find := func() []int {
		var pids []int
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			cmdline, err := os.ReadFile(d + "/cmdline")
			if err != nil {
				continue
			}
			for _, a := range strings.Split(string(cmdline), "\x00") {
				if a == arg {
					if pid, err := strconv.Atoi(filepath.Base(d)); err == nil && pid != os.Getpid() {
						pids = append(pids, pid)
					}
					break
				}
			}
		}
		return pids
	}
	pids := find()
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(5 * time.Second); len(find()) > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	return len(pids)
}
