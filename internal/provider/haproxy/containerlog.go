package haproxy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// containerLogLimit bounds the state directory's copy of a container's
// HAProxy output: past it the file moves to haproxy.log.1 (replacing the
// one before) and a new one starts. A refused reload's alerts are read from
// the bytes it appended (reloadAlerts), a few hundred; the bound only keeps
// a long-running replica's health-check lines from filling the pod's
// emptyDir.
const containerLogLimit = 1 << 20

// CopyLog copies HAProxy's output from in to out (the container's output,
// which the kubelet keeps) and to the log file of the state directory dir,
// until in ends (every HAProxy process holding it has exited). It is the
// HAProxy container's second process: there the master's output is a pipe
// to it, so that the replica's zerodrop process, which shares the
// directory, reads why a reload was refused — which Service's listener
// cannot bind — as it does from the log of an HAProxy it owns. Without
// those alerts a refused reload of many load balancers is told apart by
// halving, a dozen full reloads at thousands of Services instead of one.
//
// It never stops reading while in is open: HAProxy writes its output with
// blocking writes, so a copy that stopped would stall the master's
// reloads. A log file it cannot write is said once on out, and the copy to
// out goes on.
func CopyLog(dir string, in io.Reader, out io.Writer) error {
	ps, err := resolvePaths(Options{Dir: dir})
	if err != nil {
		return err
	}
	f, size, ferr := openLog(ps.log)
	said := false
	buf := make([]byte, 64<<10)
	for {
		n, rerr := in.Read(buf)
		if n > 0 {
			_, _ = out.Write(buf[:n])
			if f != nil && size+int64(n) > containerLogLimit {
				f.Close()
				f = nil
				if ferr = os.Rename(ps.log, ps.log+".1"); ferr == nil {
					f, size, ferr = openLog(ps.log)
				}
			}
			if f != nil {
				var w int
				w, ferr = f.Write(buf[:n])
				size += int64(w)
				if ferr != nil {
					f.Close()
					f = nil
				}
			}
			if ferr != nil && !said {
				fmt.Fprintf(out, "zerodrop haproxy: HAProxy's output is no longer copied to %s (refused reloads are then told apart without its alerts): %v\n", ps.log, ferr)
				said = true
			}
		}
		if errors.Is(rerr, io.EOF) {
			if f != nil {
				return f.Close()
			}
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("haproxy: copy HAProxy's output: %w", rerr)
		}
	}
}

// openLog opens the log file for appending and returns its size.
func openLog(path string) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("haproxy: log file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("haproxy: log file: %w", err)
	}
	return f, st.Size(), nil
}
