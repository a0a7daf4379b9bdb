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
	var pids []int
	for _, p := range Processes() {
		if len(p.Args) == 0 || p.Zombie || !match(p.Args) {
			continue // a kernel thread, exited, or not one of those
		}
		pids = append(pids, p.PID)
	}
	return pids
}

// ProcessInfo is one process of the process table.
type ProcessInfo struct {
	PID, PPID int
	// Args is the command line split into its arguments: none for a
	// kernel thread or a zombie.
	Args []string
	// Zombie: the process has exited and is not reaped yet.
	Zombie bool
}

// Processes lists every process (not this one) with its parent, its
// command line and whether it has exited: the one reader of the process
// table, for Find and for a test that checks what a run left behind
// (zombies included: a child not reaped is left behind too).
func Processes() []ProcessInfo {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []ProcessInfo
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(d + "/cmdline")
		if err != nil {
			continue // exited meanwhile
		}
		// The state and the parent follow the command name, which is in
		// parentheses.
		stat, err := os.ReadFile(d + "/stat")
		i := bytes.LastIndexByte(stat, ')')
		if err != nil || i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		p := ProcessInfo{PID: pid, PPID: ppid, Zombie: f[0] == "Z" || f[0] == "X"}
		if len(cmdline) > 0 {
			p.Args = strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
		}
		out = append(out, p)
	}
	return out
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
