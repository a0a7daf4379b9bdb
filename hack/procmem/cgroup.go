package main

// The memory cgroups (-memory-limit): each measured process runs in a
// memory cgroup of its own limited to its chart container's default memory
// limit, as the kubelet limits the container, so that an OOM kill here is
// one a user would see. The cgroup is created under this process's own
// memory cgroup (cgroup v1, the memory controller's hierarchy) or at the
// root of a cgroup v2 hierarchy with the memory controller, named for the
// process with a unique suffix, and removed at the end (also on failure
// and on an interrupt: whatever is left in it is killed first).

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

var memoryLimitFlag = flag.Bool("memory-limit", true, "run each measured process in a memory cgroup limited to its chart container's default memory limit (read from the rendered chart; cgroup v1 or v2), pass the controller GOMEMLIMIT as it would compute it in that container, report OOM kills per phase and fail on one; false: no cgroup, no GOMEMLIMIT (but -gomemlimit's)")

// memCgroup is a memory cgroup this tool created.
type memCgroup struct {
	dir   string
	v2    bool
	limit int64
	once  sync.Once
}

// newMemCgroup creates a memory cgroup for the process name (controller,
// haproxy) limited to limit bytes.
func newMemCgroup(name string, limit int64) (*memCgroup, error) {
	parent, v2, err := memoryParent()
	if err != nil {
		return nil, err
	}
	g := &memCgroup{dir: filepath.Join(parent, fmt.Sprintf("zerodrop-procmem-%s-%d-%d", name, os.Getpid(), time.Now().UnixNano()%1e6)), v2: v2, limit: limit}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return nil, fmt.Errorf("memory cgroup: %w", err)
	}
	onInterrupt(g.remove)
	file := "memory.limit_in_bytes"
	if v2 {
		file = "memory.max"
	}
	if err := g.write(file, strconv.FormatInt(limit, 10)); err != nil {
		g.remove()
		return nil, err
	}
	if !v2 {
		// With swap, v1's limit holds only the RAM part: the same limit
		// on memory+swap keeps the process from swapping past it (a
		// kubelet without swap). Absent without swap accounting.
		_ = g.write("memory.memsw.limit_in_bytes", strconv.FormatInt(limit, 10))
	}
	return g, nil
}

func (g *memCgroup) write(file, value string) error {
	if err := os.WriteFile(filepath.Join(g.dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("memory cgroup %s: %w", file, err)
	}
	return nil
}

// procsFile is where a process writes its PID to enter the cgroup.
func (g *memCgroup) procsFile() string { return filepath.Join(g.dir, "cgroup.procs") }

// wrap makes the command name args start inside the cgroup: a shell writes
// its own PID into cgroup.procs and then replaces itself with the command
// (same PID, same process group), so the process and everything it forks
// (HAProxy's master and workers) are charged to the cgroup from their
// first page, with no window in which a child is forked outside it.
func (g *memCgroup) wrap(name string, args []string) (string, []string) {
	if g == nil {
		return name, args
	}
	return "sh", append([]string{"-c", `echo $$ > "$0" && exec "$@"`, g.procsFile(), name}, args...)
}

// oomKills is the number of processes the kernel's OOM killer has killed in
// the cgroup (v1: memory.oom_control's oom_kill, kernels since 4.13; v2:
// memory.events' oom_kill).
func (g *memCgroup) oomKills() (int64, error) {
	file, key := "memory.oom_control", "oom_kill"
	if g.v2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(g.dir, file))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s has no %s line", file, key)
}

// peak is the cgroup's highest memory use (what the limit is checked
// against: every process's pages and the page cache they caused) since
// resetPeak (v1) or since its creation (v2); -1 where not readable.
func (g *memCgroup) peak() int64 {
	file := "memory.max_usage_in_bytes"
	if g.v2 {
		file = "memory.peak"
	}
	b, err := os.ReadFile(filepath.Join(g.dir, file))
	if err != nil {
		return -1
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -1
	}
	return v
}

// resetPeak starts peak over (v1 only: v2's memory.peak is reset only for
// the file descriptor that wrote it).
func (g *memCgroup) resetPeak() {
	if !g.v2 {
		_ = g.write("memory.max_usage_in_bytes", "0")
	}
}

// remove kills whatever is left in the cgroup and removes it. Idempotent.
func (g *memCgroup) remove() {
	g.once.Do(func() {
		for try := 0; try < 50; try++ {
			b, err := os.ReadFile(g.procsFile())
			if err != nil {
				break
			}
			pids := strings.Fields(string(b))
			if len(pids) == 0 {
				break
			}
			for _, s := range pids {
				if pid, err := strconv.Atoi(s); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		var err error
		for try := 0; try < 50; try++ {
			// The last process's exit may take a moment to leave the
			// cgroup: rmdir fails with EBUSY until it has.
			if err = syscall.Rmdir(g.dir); err == nil || errors.Is(err, syscall.ENOENT) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		fmt.Fprintf(os.Stderr, "procmem: memory cgroup %s not removed: %v\n", g.dir, err)
	})
}

// memoryParent is the directory the cgroups are created in and whether it
// is cgroup v2: the root of a v2 hierarchy whose root has the memory
// controller (enabled for its children here if it is not yet), else this
// process's own cgroup in the v1 memory hierarchy.
func memoryParent() (string, bool, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return "", false, err
	}
	for _, m := range mounts {
		if m.fstype != "cgroup2" {
			continue
		}
		ctl, err := os.ReadFile(filepath.Join(m.dir, "cgroup.controllers"))
		if err != nil || !strings.Contains(" "+strings.TrimSpace(string(ctl))+" ", " memory ") {
			continue
		}
		sub := filepath.Join(m.dir, "cgroup.subtree_control")
		if b, _ := os.ReadFile(sub); !strings.Contains(" "+strings.TrimSpace(string(b))+" ", " memory ") {
			if err := os.WriteFile(sub, []byte("+memory"), 0o644); err != nil {
				return "", false, fmt.Errorf("enable the memory controller in %s: %w", sub, err)
			}
		}
		return m.dir, true, nil
	}
	for _, m := range mounts {
		if m.fstype != "cgroup" || !strings.Contains(","+m.options+",", ",memory,") {
			continue
		}
		own, err := ownCgroup("memory")
		if err != nil {
			return "", false, err
		}
		return filepath.Join(m.dir, own), false, nil
	}
	return "", false, errors.New("no cgroup v2 hierarchy with the memory controller and no cgroup v1 memory hierarchy is mounted (-memory-limit=false runs without)")
}

type cgroupMount struct{ dir, fstype, options string }

// cgroupMounts lists the cgroup file systems this process sees, from
// /proc/self/mountinfo (its super options say which v1 controllers).
func cgroupMounts() ([]cgroupMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []cgroupMount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID parent major:minor root mountpoint options [tags] - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 || (qf[0] != "cgroup" && qf[0] != "cgroup2") {
			continue
		}
		out = append(out, cgroupMount{dir: pf[4], fstype: qf[0], options: qf[2]})
	}
	return out, sc.Err()
}

// ownCgroup is this process's cgroup in the v1 hierarchy of controller,
// from /proc/self/cgroup (hierarchy-ID:controllers:path).
func ownCgroup(controller string) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && strings.Contains(","+f[1]+",", ","+controller+",") {
			return f[2], nil
		}
	}
	return "", fmt.Errorf("/proc/self/cgroup names no %s cgroup", controller)
}

// interrupts: on SIGINT or SIGTERM the registered functions run, last
// first, and the tool exits; the processes it started are leaders of their
// own process groups (internal/supervisor), so a terminal's Ctrl-C reaches
// only this one, which must stop them and remove its cgroups.
var (
	interruptMu    sync.Mutex
	interruptFuncs []func()
)

// onInterrupt registers f to run on an interrupt; f must be idempotent, as
// the normal path's defers run it too.
func onInterrupt(f func()) {
	interruptMu.Lock()
	defer interruptMu.Unlock()
	interruptFuncs = append(interruptFuncs, f)
}

func runInterruptFuncs() {
	interruptMu.Lock()
	fs := interruptFuncs
	interruptFuncs = nil
	interruptMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}
