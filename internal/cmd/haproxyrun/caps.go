package haproxyrun

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// The capabilities HAProxy's master needs, as root, to run its workers as
// another user: CAP_SETGID and CAP_SETUID for each new worker to drop its
// groups and change user, CAP_KILL to stop the old workers (another user's
// processes) after a reload. Without CAP_KILL the reload itself succeeds
// but the old workers never stop, and without the others every worker
// exits at once.
var workerUserCaps = []struct {
	bit  uint
	name string
}{{5, "KILL"}, {6, "SETGID"}, {7, "SETUID"}}

// checkCapabilities fails when this process (root, about to exec HAProxy)
// lacks a capability HAProxy's master needs for the worker user u: root
// keeps, across the exec, those both effective now and in its bounding set.
func checkCapabilities(u *haproxy.WorkerUser) error {
	eff, bnd, err := ownCapabilities()
	if err != nil {
		return fmt.Errorf("--worker-user %s: %w", u, err)
	}
	var missing []string
	for _, c := range workerUserCaps {
		if eff&bnd&(1<<c.bit) == 0 {
			missing = append(missing, c.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("--worker-user %s: HAProxy's master needs the capabilities KILL, SETGID and SETUID to run its workers as that user, and this container lacks %s: "+
			"add them to the container's securityContext.capabilities, or pass --worker-user= to keep the workers root",
			u, strings.Join(missing, ", "))
	}
	return nil
}

// ownCapabilities are this process's effective and bounding capability sets
// (/proc/self/status).
func ownCapabilities() (eff, bnd uint64, err error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0, fmt.Errorf("read own capabilities: %w", err)
	}
	defer f.Close()
	found := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "CapEff" && k != "CapBnd") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("read own capabilities: %s %q: %w", k, v, err)
		}
		if k == "CapEff" {
			eff = n
		} else {
			bnd = n
		}
		found++
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("read own capabilities: %w", err)
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("read own capabilities: no CapEff and CapBnd in /proc/self/status")
	}
	return eff, bnd, nil
}
