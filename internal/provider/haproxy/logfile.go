package haproxy

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The owned master's haproxy.log holds its stdout and stderr: every
// warning of every reload (one per proxy paused and per server whose state
// it loads: megabytes at thousands of Services), so it is cut at a reload
// once it passes Options.LogMaxBytes (rotateLog).

// DefaultLogMaxBytes is Options.LogMaxBytes's default.
const DefaultLogMaxBytes = 16 << 20

// rotateLog cuts the owned master's log when it passed LogMaxBytes: its
// content is copied to haproxy.log.1 (replacing the one before) and the
// file truncated in place. Not renamed: the master keeps its descriptor
// for its whole life (a reload re-executes it with the same one), and
// writes through it would follow the renamed file forever; opened with
// O_APPEND, they land at the truncated file's new end. Lines the master
// writes between the copy and the truncation are lost: rotation happens
// before a reload is asked for, when the master is quiet. Best effort: a
// failure leaves the log as it was and is logged.
func (p *Provider) rotateLog() {
	limit := p.opts.LogMaxBytes
	if limit < 0 || p.logSize() <= limit {
		return
	}
	if err := copyFile(p.paths.log, p.paths.log+".1"); err != nil {
		p.log.Error(err, "haproxy.log not rotated")
		return
	}
	if err := os.Truncate(p.paths.log, 0); err != nil {
		p.log.Error(err, "haproxy.log not truncated after its copy")
	}
}

// copyFile writes src's content to dst through a temporary file renamed
// over it.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// logTail is the end of the owned master's log, for error messages.
func (p *Provider) logTail() string {
	f, err := os.Open(p.paths.log)
	if err != nil {
		return "(no log)"
	}
	defer f.Close()
	const tail = 2000
	if st, err := f.Stat(); err == nil && st.Size() > tail {
		if _, err := f.Seek(-tail, io.SeekEnd); err != nil {
			return "(no log)"
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, 2*tail))
	if err != nil {
		return "(no log)"
	}
	return strings.TrimSpace(string(data))
}

// logSize is the log's length now: a reload's own lines are those after it.
func (p *Provider) logSize() int64 {
	st, err := os.Stat(p.paths.log)
	if err != nil {
		return 0
	}
	return st.Size()
}

// reloadAlerts are the alerts of the refused reload that started when the
// log was from bytes long: its lines only, so that an alert of an earlier
// reload, or a running worker's, is not taken for its cause (failNamed fails
// the Services its alerts name). It waits, a bounded time, for the master's
// closing line. Without a log (an HAProxy zerodrop attached to, as a
// data-plane replica's, whose output is its container's) it answers at
// once.
func (p *Provider) reloadAlerts(ctx context.Context, from int64) string {
	deadline := time.Now().Add(2 * time.Second)
	for {
		alerts, done, ok := p.alertsSince(from)
		if !ok {
			return "(no log)"
		}
		if done || time.Now().After(deadline) || ctx.Err() != nil {
			if len(alerts) == 0 {
				return p.logAlerts()
			}
			return strings.Join(alerts, "; ")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alertsSince reads the log from offset from on (all of a log that rotated
// since) and returns its last 20 alerts, whether the master's
// verdict on a failed reload is there, and false when there is no log. An
// owned HAProxy's log holds every warning too: at each reload one per proxy
// paused and per server whose state it loads, megabytes at thousands of
// Services, so it reads line by line, keeping alerts only.
func (p *Provider) alertsSince(from int64) (alerts []string, done, ok bool) {
	f, err := os.Open(p.paths.log)
	if err != nil {
		return nil, false, false
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() < from {
		from = 0
	}
	sc := bufio.NewScanner(io.NewSectionReader(f, from, 1<<62))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "[ALERT]"):
			if alerts = append(alerts, line); len(alerts) > 20 {
				alerts = alerts[1:]
			}
		case strings.Contains(line, "Loading failure"):
			done = true
		}
	}
	return alerts, done, true
}

// logAlerts is the last alerts of the owned master's log (why a start or a
// reload failed), or its tail when it has none.
func (p *Provider) logAlerts() string { return alertLines(p.logTail(), 5) }

// alertLines are the [ALERT] lines of HAProxy's output text, the last
// `last` of them (all when last is 0), on one line; text itself when it has
// none.
func alertLines(text string, last int) string {
	var alerts []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "[ALERT]") {
			alerts = append(alerts, line)
		}
	}
	if len(alerts) == 0 {
		return text
	}
	if last > 0 && len(alerts) > last {
		alerts = alerts[len(alerts)-last:]
	}
	return strings.Join(alerts, "; ")
}
