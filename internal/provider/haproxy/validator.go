package haproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// Validation is `haproxy -c` on a configuration before it is loaded. It
// parses the whole configuration into HAProxy's structures: about 14 MiB
// plus 9 KiB per listener and 4.2 KiB per server at its peak (HAProxy
// 2.6.12), 181 MiB at 10,000 listeners of two servers. Run as the
// controller's child it was charged to the controller's container, beside
// a Go heap of the same order, which the container's limit could not hold.
// So a data-plane replica asks `zerodrop haproxy`, in HAProxy's container,
// to run it (ServeValidation, on ValidationSocket in the state directory
// both containers mount): its memory is that container's, which holds a
// reload's one and a half configurations anyway and validates before, not
// during, a reload. The answer is the same either way: a configuration
// HAProxy refuses is errRejected with HAProxy's alerts, and anything else
// that keeps the check from running is a plain error (retried, never a
// refusal of the members: see reloadRefused).

// ValidationSocketName is the validation socket's name in the state
// directory.
const ValidationSocketName = "validate.sock"

// ValidationSocket is the validation socket of the state directory dir.
func ValidationSocket(dir string) string { return filepath.Join(dir, ValidationSocketName) }

// validationTimeout bounds one check when the caller's context does not.
const validationTimeout = 2 * time.Minute

// The reply's first line: the verdict. The rest is HAProxy's alerts
// (rejected) or why the check did not run (error).
const (
	verdictOK       = "ok"
	verdictRejected = "rejected"
	verdictError    = "error"
)

// validate checks a configuration file before it is loaded: through the
// validation socket when Options.ValidateSocket is set, else as a child of
// this process.
func (p *Provider) validate(ctx context.Context, file string) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.ReloadTimeout)
	defer cancel()
	if p.opts.ValidateSocket != "" {
		return validateAt(ctx, p.opts.ValidateSocket, file)
	}
	rejected, alerts, err := runCheck(ctx, p.binary, file)
	if rejected {
		return fmt.Errorf("haproxy: invalid configuration %s: %w: %s", file, errRejected, alerts)
	}
	return err
}

// validateAt asks the validator listening on socket to check file (an
// absolute path in the validator's state directory).
func validateAt(ctx context.Context, socket, file string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("haproxy: checking %s: validator: %w", file, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	if _, err := io.WriteString(conn, file+"\n"); err != nil {
		return fmt.Errorf("haproxy: checking %s: validator: write: %w", file, err)
	}
	reply, err := io.ReadAll(conn)
	if err != nil {
		return fmt.Errorf("haproxy: checking %s: validator: read: %w", file, errors.Join(err, ctx.Err()))
	}
	verdict, text, _ := strings.Cut(string(reply), "\n")
	switch verdict {
	case verdictOK:
		return nil
	case verdictRejected:
		return fmt.Errorf("haproxy: invalid configuration %s (checked in HAProxy's container): %w: %s", file, errRejected, text)
	case verdictError:
		return fmt.Errorf("haproxy: checking %s in HAProxy's container: %s", file, text)
	default:
		return fmt.Errorf("haproxy: checking %s: validator: unexpected reply %q", file, firstLine(string(reply)))
	}
}

// ListenValidation creates the validation socket of dir, a state
// directory (owner only): a stale socket of an earlier container is
// replaced, and the socket is the owner's alone (mode 600), as HAProxy's
// are.
func ListenValidation(dir string) (*net.UnixListener, error) {
	if err := ensureStateDir(dir); err != nil {
		return nil, err
	}
	path := ValidationSocket(dir)
	if err := checkOwnSocket(path); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("haproxy: validation socket: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("haproxy: validation socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("haproxy: validation socket: %w", err)
	}
	return ln, nil
}

// ServeValidation answers checks on ln until ctx ends: each connection
// names one configuration file, which must be in dir (the state directory:
// a caller cannot make it read other files), and gets the verdict of
// `binary -c` on it. Checks run one at a time, so the container holds at
// most one parse beside HAProxy. A check whose caller has gone is stopped.
func ServeValidation(ctx context.Context, ln net.Listener, binary, dir string, log logr.Logger) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var one sync.Mutex
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("haproxy: validation socket: %w", err)
		}
		go func() {
			defer conn.Close()
			one.Lock()
			defer one.Unlock()
			verdict, text := checkRequest(ctx, conn, binary, dir)
			log.V(1).Info("configuration checked", "verdict", verdict)
			if verdict == verdictError {
				log.Info("configuration not checked", "reason", text)
			}
			_, _ = io.WriteString(conn, verdict+"\n"+text)
		}()
	}
}

// checkRequest reads one request from conn and checks its file.
func checkRequest(ctx context.Context, conn net.Conn, binary, dir string) (verdict, text string) {
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(io.LimitReader(conn, 4096))
	line, err := r.ReadString('\n')
	if err != nil {
		return verdictError, fmt.Sprintf("request: %v", err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	file := strings.TrimSuffix(line, "\n")
	if !filepath.IsAbs(file) || filepath.Clean(file) != file || filepath.Dir(file) != dir {
		return verdictError, fmt.Sprintf("%q is not a file of the state directory %s", file, dir)
	}
	ctx, cancel := context.WithTimeout(ctx, validationTimeout)
	defer cancel()
	// The caller sends nothing more: a read that ends means it has gone
	// (its own timeout), and the check is stopped.
	go func() {
		_, _ = r.ReadByte()
		cancel()
	}()
	rejected, alerts, err := runCheck(ctx, binary, file)
	switch {
	case rejected:
		return verdictRejected, alerts
	case err != nil:
		return verdictError, err.Error()
	default:
		return verdictOK, ""
	}
}
