package haproxy

// The master CLI's view of the processes: `show proc`, read to find the
// master and its workers and to wait for a master to answer again.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// procInfo is the master CLI's `show proc`.
type procInfo struct {
	Master     int
	Reloads    int
	Failed     int
	Workers    []int // current worker(s)
	OldWorkers []int // workers of previous configurations that still serve connections
}

// parseProc parses `show proc` of HAProxy 2.6:
//
//	#<PID>          <type>          <reloads>       <uptime>        <version>
//	25289           master          2 [failed: 0]   0d00h22m43s     2.6.12
//	# workers
//	17170           worker          0               0d00h00m00s     2.6.12
//	# old workers
//	16661           worker          1               0d00h00m25s     2.6.12
//	# programs
func parseProc(text string) (procInfo, error) {
	var info procInfo
	section := "master"
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
			continue
		case line == "# workers":
			section = "workers"
			continue
		case line == "# old workers":
			section = "old"
			continue
		case strings.HasPrefix(line, "#"):
			if !strings.HasPrefix(line, "#<PID>") {
				section = "other"
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			return procInfo{}, fmt.Errorf("show proc: bad line %q", line)
		}
		switch {
		case section == "master" && f[1] == "master":
			info.Master = pid
			info.Reloads, _ = strconv.Atoi(f[2])
			if len(f) >= 5 && f[3] == "[failed:" {
				info.Failed, _ = strconv.Atoi(strings.TrimSuffix(f[4], "]"))
			}
		case section == "workers" && f[1] == "worker":
			info.Workers = append(info.Workers, pid)
		case section == "old" && f[1] == "worker":
			info.OldWorkers = append(info.OldWorkers, pid)
		}
	}
	if info.Master == 0 {
		return procInfo{}, fmt.Errorf("show proc: no master in %q", firstLine(text))
	}
	return info, nil
}

// Procs reads `show proc` on the master socket: the master's PID, the current
// workers and the old workers still finishing connections after a reload.
func (p *Provider) Procs(ctx context.Context) (master int, workers, oldWorkers []int, err error) {
	info, err := p.procs(ctx)
	return info.Master, info.Workers, info.OldWorkers, err
}

func (p *Provider) procs(ctx context.Context) (procInfo, error) {
	p.hooks.OnRead("show-proc")
	reply, err := p.master.do(ctx, "show proc")
	if err != nil {
		return procInfo{}, err
	}
	return parseProc(reply)
}

// awaitMaster waits for the live master pid to answer on its socket again
// (or to exit), for at most the reload timeout.
func (p *Provider) awaitMaster(ctx context.Context, pid int) (procInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.ReloadTimeout)
	defer cancel()
	for {
		info, err := p.procs(ctx)
		if err == nil {
			return info, nil
		}
		if !p.alive(pid) {
			return procInfo{}, err
		}
		select {
		case <-ctx.Done():
			return procInfo{}, fmt.Errorf("haproxy: master %d of %s does not answer: %w (last: %v)", pid, p.paths.dir, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
