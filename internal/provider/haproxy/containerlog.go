package haproxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// containerLogLimit bounds the state directory's copy of a container's
// HAProxy output: past it the file moves to haproxy.log.1 (replacing the
// one before) and a new one starts. Only HAProxy's alerts and notices are
// copied there (loggedLine), a few lines a reload; the bound only keeps a
// replica that runs for months from filling the pod's emptyDir.
const containerLogLimit = 1 << 20

// CopyLog copies HAProxy's output from in to out (the container's output,
// which the kubelet keeps) and its alerts and notices to the log file of
// the state directory dir, until in ends (every HAProxy process holding it
// has exited). It is the HAProxy container's second process: there the
// master's output is a pipe to it, so that the replica's zerodrop process,
// which shares the directory, reads why a reload was refused — which
// Service's listener cannot bind — as it does from the log of an HAProxy it
// owns. Without those alerts a refused reload of many load balancers is
// told apart by halving, a dozen full reloads at thousands of Services
// instead of one.
//
// Warnings are not copied to the file: at every reload HAProxy warns once
// per proxy paused and per server whose state it loads (about 1.6 MB at
// 5,000 Services), which would bury a refused reload's alerts and rotate
// the file within one reload.
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
	r := bufio.NewReaderSize(in, 64<<10)
	line := make([]byte, 0, 4<<10)
	for {
		chunk, rerr := r.ReadSlice('\n')
		if len(chunk) > 0 {
			_, _ = out.Write(chunk)
			// A line longer than the buffer comes in pieces: the file
			// takes its first 4 KiB (its end a newline), when it is a line to keep.
			if len(line) < cap(line) {
				line = append(line, chunk[:min(len(chunk), cap(line)-len(line))]...)
			}
		}
		ended := len(chunk) > 0 && chunk[len(chunk)-1] == '\n'
		if ended || (rerr != nil && !errors.Is(rerr, bufio.ErrBufferFull) && len(line) > 0) {
			if f != nil && loggedLine(line) {
				// One line each, also when cut short or the last.
				if line[len(line)-1] != '\n' {
					if len(line) == cap(line) {
						line[len(line)-1] = '\n'
					} else {
						line = append(line, '\n')
					}
				}
				if size+int64(len(line)) > containerLogLimit {
					f.Close()
					f = nil
					if ferr = os.Rename(ps.log, ps.log+".1"); ferr == nil {
						f, size, ferr = openLog(ps.log)
					}
				}
				if f != nil {
					var w int
					w, ferr = f.Write(line)
					size += int64(w)
					if ferr != nil {
						f.Close()
						f = nil
					}
				}
			}
			line = line[:0]
		}
		if ferr != nil && !said {
			fmt.Fprintf(out, "zerodrop haproxy: HAProxy's alerts are no longer copied to %s (refused reloads are then told apart without them): %v\n", ps.log, ferr)
			said = true
		}
		switch {
		case rerr == nil, errors.Is(rerr, bufio.ErrBufferFull):
		case errors.Is(rerr, io.EOF):
			if f != nil {
				return f.Close()
			}
			return nil
		default:
			return fmt.Errorf("haproxy: copy HAProxy's output: %w", rerr)
		}
	}
}

// loggedLine says whether a line of HAProxy's output goes to the state
// directory's log: alerts (why a start or reload failed), notices (workers
// forked, reloads) and the master's verdict on a reload ("Loading
// failure!", a warning), which reloadAlerts waits for.
func loggedLine(line []byte) bool {
	return bytes.HasPrefix(line, []byte("[ALERT]")) || bytes.HasPrefix(line, []byte("[NOTICE]")) || bytes.Contains(line, []byte("Loading failure"))
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
