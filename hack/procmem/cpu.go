package main

// CPU seconds: the kernel's count of a process's user and system time
// (/proc/PID/stat), read at each reading; a phase's CPU is the difference
// between its reading and the one before on the same process.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go runs on (the kernel scales to it whatever its HZ).
const clockTicks = 100

// procCPU is pid's CPU seconds (utime+stime) and, with children, those of
// its children it has waited for (cutime+cstime): HAProxy's master reaps
// its old workers, whose time then moves to it. -1 when unreadable.
func procCPU(pid int, children bool) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// comm, in parentheses, may hold spaces: fields count from after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): utime, stime, cutime, cstime are 14 to 17.
	if len(f) < 15 {
		return -1
	}
	n := 2
	if children {
		n = 4
	}
	var ticks int64
	for _, v := range f[11 : 11+n] {
		t, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return -1
		}
		ticks += t
	}
	return float64(ticks) / clockTicks
}

// haproxyReading is HAProxy's processes at one moment: their CPU seconds
// (the master with the workers it has reaped, and every live worker,
// current and old, as the master lists them: haproxy.MasterProcs), their
// PSS together, and its reload count.
type haproxyReading struct {
	cpu     float64
	pss     uint64
	reloads int
	ok      bool
}

// readHAProxy reads the HAProxy whose master socket is in hdir; not ok
// when there is none (the control role) or it does not answer.
func readHAProxy(hdir string) haproxyReading {
	sock := filepath.Join(hdir, "master.sock")
	if _, err := os.Stat(sock); err != nil {
		return haproxyReading{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	master, reloads, workers, olds, err := haproxy.MasterProcs(ctx, sock)
	if err != nil {
		return haproxyReading{}
	}
	r := haproxyReading{cpu: procCPU(master, true), pss: haproxyTreePSS(master), reloads: reloads, ok: true}
	for _, pid := range append(workers, olds...) {
		if c := procCPU(pid, false); c > 0 {
			r.cpu += c
		}
	}
	return r
}

// cpuSeconds formats a CPU time; "n/a" when unread.
func cpuSeconds(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f s", v)
}
