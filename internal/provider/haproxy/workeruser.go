package haproxy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// HAProxy's workers hold the connections of the Internet-facing listeners
// and parse their traffic; the master binds the listeners (ports below 1024
// need root or NET_BIND_SERVICE), re-executes itself on every reload, and
// stops old workers. So in the data-plane container the master stays root and
// the workers run as an unprivileged user: a bug in the traffic path gives
// that user, which owns no file of the state directory (0700, root) and no
// socket (the admin and master sockets are root's, mode 600).
//
// What the workers need after they dropped root was opened for them before:
// the listeners, the admin socket and the map file are bound or loaded by the
// master as root when it parses the configuration, and the server-state file
// too (load-server-state-from-file); zerodrop writes the server-state file
// itself from `show servers state`. The master needs CAP_SETUID and
// CAP_SETGID to start its workers as that user and CAP_KILL to stop the old
// ones after a reload (a signal to another user's process).

// DefaultWorkerUser is the data plane's: nobody and nogroup on Debian, whose
// package the data-plane image installs HAProxy from.
const DefaultWorkerUser = "65534:65534"

// workerUserName is the file in the state directory that holds the worker
// user's global settings (ContainerArgs).
const workerUserName = "workers.cfg"

// WorkerUser is the numeric user and group HAProxy's workers run as (its
// global uid and gid), names being useless in an image whose /etc/passwd may
// not have them.
type WorkerUser struct {
	UID, GID int
}

func (u WorkerUser) String() string { return fmt.Sprintf("%d:%d", u.UID, u.GID) }

// ParseWorkerUser parses UID:GID. The empty string is no worker user (nil):
// the workers keep the user HAProxy starts as. Root is refused: it is what
// the setting exists to avoid, and an empty value already says "unchanged".
func ParseWorkerUser(s string) (*WorkerUser, error) {
	if s == "" {
		return nil, nil
	}
	us, gs, ok := strings.Cut(s, ":")
	if !ok {
		return nil, fmt.Errorf("worker user %q: want UID:GID (numbers), e.g. %s", s, DefaultWorkerUser)
	}
	uid, err := parseID(us)
	if err != nil {
		return nil, fmt.Errorf("worker user %q: uid: %w", s, err)
	}
	gid, err := parseID(gs)
	if err != nil {
		return nil, fmt.Errorf("worker user %q: gid: %w", s, err)
	}
	if uid == 0 || gid == 0 {
		return nil, fmt.Errorf("worker user %q: workers must not run as root (uid or gid 0); leave it empty to keep the user HAProxy starts as", s)
	}
	return &WorkerUser{UID: uid, GID: gid}, nil
}

// parseID parses a uid or gid: a decimal number below 2^31 - 1 (HAProxy
// reads them as int; -1 means "unchanged" to setuid).
func parseID(s string) (int, error) {
	n, err := strconv.ParseUint(s, 10, 31)
	if err != nil || n == 1<<31-1 {
		return 0, fmt.Errorf("%q is not a number from 0 to %d", s, 1<<31-2)
	}
	return int(n), nil
}

func workerUserFile(dir string) string { return filepath.Join(dir, workerUserName) }

// renderWorkerUser is the worker user's global section.
func renderWorkerUser(u WorkerUser) []byte {
	return fmt.Appendf(nil, "# Written by `zerodrop haproxy` (internal/provider/haproxy) at every start of the\n"+
		"# HAProxy container: the master binds the listeners as root; its workers run as\n"+
		"# this user and group.\n"+
		"global\n    uid %d\n    gid %d\n", u.UID, u.GID)
}

// PrepareWorkerUser writes the worker user's settings to the state directory
// dir (made by PrepareContainer), which ContainerArgs gives HAProxy with the
// configuration; with no user it removes a file an earlier start left, so
// the setting follows the container's arguments.
func PrepareWorkerUser(dir string, u *WorkerUser) error {
	ps, err := resolvePaths(Options{Dir: dir})
	if err != nil {
		return err
	}
	file := workerUserFile(ps.dir)
	if u == nil {
		if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("haproxy: remove the worker user's file: %w", err)
		}
		return nil
	}
	return writeFileAtomic(file, renderWorkerUser(*u))
}
