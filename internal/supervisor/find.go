package supervisor

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Find lists the live processes (not this one, not zombies) whose command
// line, split into its arguments, match accepts. It is for processes that
// are no child of this one: an HAProxy master in a session of its own that
// a test or an earlier lab run left behind.
func Find(match func(args []string) bool) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(d + "/cmdline")
		if err != nil || len(cmdline) == 0 {
			continue // exited meanwhile, or a kernel thread
		}
		if !match(strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")) {
			continue
		}
		// The state follows the command name, which is in parentheses.
		stat, err := os.ReadFile(d + "/stat")
		if i := bytes.LastIndexByte(stat, ')'); err != nil || i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// KillMatching SIGKILLs every process Find(match) lists and waits, up to
// bound, until none is left; it returns how many it found.
func KillMatching(match func(args []string) bool, bound time.Duration) int {
	pids := Find(match)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(bound); len(Find(match)) > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	return len(pids)
}
