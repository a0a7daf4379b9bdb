package azure

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/report"
)

// What a stretch of the emulator's record says about the writers: writes
// by kind, what they changed, 412s, 409s and superseded operations, and
// the writers' error log lines.

// recordFigures are the writers' writes and reads in a stretch of the
// record (the pool drift's are not theirs).
type recordFigures struct {
	// writes are the PUTs and DELETEs sent (attempts: a 412 counts), of
	// which lbPuts, poolPuts and deletes by kind, and changed those that
	// changed a stored document.
	lbPuts, poolPuts, deletes, writes, changed, gets, preconditionFailed int
	// conflicts are 409 answers; superseded the writes whose operation a
	// later write to the same load balancer superseded.
	conflicts, superseded int
	// rewrites are the writes ARM accepted that changed nothing stored:
	// a writer sending what is already there (kill-mid-plan fails on one).
	rewrites []azurearm.Call
}

func figuresOf(calls []azurearm.Call) recordFigures {
	var f recordFigures
	for _, c := range calls {
		switch {
		case c.Client == driftIdentity: // not a writer's (drift.go)
			continue
		case c.Superseded():
			f.superseded++
			continue
		case c.Method == http.MethodGet:
			f.gets++
		case c.Status == http.StatusPreconditionFailed:
			f.preconditionFailed++
		case c.Status == http.StatusConflict:
			f.conflicts++
		}
		if c.Method != http.MethodPut && c.Method != http.MethodDelete {
			continue
		}
		f.writes++
		switch {
		case c.Method == http.MethodDelete:
			f.deletes++
		case c.Kind == "loadBalancer":
			f.lbPuts++
		case c.Kind == "backendAddressPool":
			f.poolPuts++
		}
		if len(c.Changes) > 0 {
			f.changed++
		} else if c.Write() {
			f.rewrites = append(f.rewrites, c)
		}
	}
	return f
}

// writeDiffs summarises what writes changed: backend addresses removed
// (an address that served no longer in its pool: an IP-based pool's
// address, or a NIC-based pool's member — a scale-set instance's or a NIC's
// ipconfig that no longer names the pool) and changes to a probe or a
// load-balancing rule.
type writeDiffs struct{ removedBackends, probeOrRule int }

// memberKinds are the compute writes that change a NIC-based pool's
// membership (a scale set's model reaches the pools only through its
// instances' updates).
var memberKinds = []string{"virtualMachineScaleSetVM", "networkInterface"}

func diffsOf(calls []azurearm.Call) writeDiffs {
	var d writeDiffs
	for _, c := range calls {
		if !c.Write() || c.Client == driftIdentity { // not a writer's (drift.go)
			continue
		}
		removed := map[string]bool{}
		if slices.Contains(memberKinds, c.Kind) {
			d.removedBackends += poolsLeft(c.Changes)
		}
		for _, ch := range c.Changes {
			path := changePath(ch)
			if strings.HasPrefix(ch, "- ") && strings.Contains(path, "loadBalancerBackendAddresses[") && strings.HasSuffix(path, ".properties.ipAddress") {
				removed[path] = true
			}
			if c.Kind == "loadBalancer" && (strings.HasPrefix(path, "properties.probes[") || strings.HasPrefix(path, "properties.loadBalancingRules[")) {
				d.probeOrRule++
			}
		}
		d.removedBackends += len(removed)
	}
	return d
}

// writeDiffsOf are the writes among calls (the record from mark on) that
// changed a stored document, each with the stop it followed and its
// changes; the pool drift's among them, named by driftIdentity.
func writeDiffsOf(calls []azurearm.Call, mark int, stops []stopAt) []report.WriteDiff {
	var out []report.WriteDiff
	for i, c := range calls {
		if !c.Write() || len(c.Changes) == 0 {
			continue
		}
		after := 0
		for after < len(stops) && stops[after].mark <= mark+i {
			after++
		}
		shown := c.Changes[:min(len(c.Changes), report.MaxWriteDiffLines)]
		out = append(out, report.WriteDiff{AfterStop: after, Call: c.String(), Changes: slices.Clone(shown),
			Omitted: len(c.Changes) - len(shown)})
	}
	return out
}

// poolsLeft counts the pools an ipconfig stopped naming in one write: per
// ipconfig, the pool IDs its loadBalancerBackendAddressPools held before
// (removed or replaced entries) that it does not hold after (added or
// replacing entries). The record keys these references by index, so a
// pool that only moved in the list is old at one index and new at
// another: not counted.
func poolsLeft(changes []string) int {
	type sides struct{ before, after map[string]bool }
	byIPConfig := map[string]*sides{}
	for _, ch := range changes {
		path := changePath(ch)
		i := strings.Index(path, ".loadBalancerBackendAddressPools[")
		if i < 0 || !strings.HasSuffix(path, "].id") {
			continue
		}
		sd := byIPConfig[path[:i]]
		if sd == nil {
			sd = &sides{before: map[string]bool{}, after: map[string]bool{}}
			byIPConfig[path[:i]] = sd
		}
		rest := ch[2+len(path):]
		switch ch[0] {
		case '-':
			sd.before[strings.ToLower(strings.TrimPrefix(rest, " = "))] = true
		case '+':
			sd.after[strings.ToLower(strings.TrimPrefix(rest, " = "))] = true
		case '~':
			old, next, _ := strings.Cut(strings.TrimPrefix(rest, ": "), " -> ")
			sd.before[strings.ToLower(old)], sd.after[strings.ToLower(next)] = true, true
		}
	}
	n := 0
	for _, sd := range byIPConfig {
		for id := range sd.before {
			if !sd.after[id] {
				n++
			}
		}
	}
	return n
}

// changePath is the path of a Call.Changes line.
func changePath(line string) string {
	p := line[2:]
	if i := strings.IndexAny(p, " :"); i >= 0 {
		p = p[:i]
	}
	return p
}

// recordIdle is how long the record must stay without a call for the
// writers to count as quiet; recordSettleLimit bounds the wait (writers
// that never go quiet are measured as they are rather than hang the lab).
const (
	recordIdle        = 500 * time.Millisecond
	recordSettleLimit = 30 * time.Second
)

// settleRecord waits until the emulator has recorded no call for
// recordIdle, at most recordSettleLimit.
func settleRecord(ctx context.Context, emu *azurearm.Emulator) {
	_, last := emu.Calls(0)
	since, end := time.Now(), time.Now().Add(recordSettleLimit)
	for time.Since(since) < recordIdle && ctx.Err() == nil && time.Now().Before(end) {
		time.Sleep(20 * time.Millisecond)
		if _, n := emu.Calls(0); n != last {
			last, since = n, time.Now()
		}
	}
}

// logSizes is where each log ends now: errorLogLines counts the lines
// written after.
func logSizes(paths []string) map[string]int64 {
	out := map[string]int64{}
	for _, path := range paths {
		if fi, err := os.Stat(path); err == nil {
			out[path] = fi.Size()
		}
	}
	return out
}

// maxShownErrorLines are the error lines a run shows of those it counts.
const maxShownErrorLines = 5

// errorLogLines counts the klog lines of severity E (`E1127 …`) logged in
// paths after from, and returns the first maxShownErrorLines, each cut to
// 300 bytes, so that a run that has them says what they were.
func errorLogLines(paths []string, from map[string]int64) (int, []string) {
	n := 0
	var shown []string
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if _, err := f.Seek(from[path], 0); err == nil {
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 64*1024), 1024*1024)
			for sc.Scan() {
				if isKlogError(sc.Text()) {
					n++
					if len(shown) < maxShownErrorLines {
						shown = append(shown, truncateLine(sc.Text(), 300))
					}
				}
			}
		}
		_ = f.Close()
	}
	return n, shown
}

func truncateLine(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// isKlogError reports whether line is a klog line of severity E:
// "E" then the month and day, a space and the time.
func isKlogError(line string) bool {
	if len(line) < 6 || line[0] != 'E' || line[5] != ' ' {
		return false
	}
	for _, c := range line[1:5] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
