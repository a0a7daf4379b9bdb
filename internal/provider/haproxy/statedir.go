package haproxy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// The state directory holds the sockets the provider writes commands to and
// the configuration HAProxy loads: whoever can write in it controls the load
// balancer. The default lives under the shared temporary directory, where
// anyone may have created it first, so the provider uses it only when it is
// ours and nobody else can write in it.

// ensureStateDir creates dir (mode 0700) or checks the one that exists: it
// must be a directory owned by this process's user and not writable by group
// or others. One we own but left readable (older versions created it 0755)
// is made private.
func ensureStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("haproxy: state dir %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("haproxy: state dir %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("haproxy: state dir %s is not a directory", dir)
	}
	if err := ownedByUs(dir, fi); err != nil {
		return fmt.Errorf("haproxy: refusing state dir %s: %w; remove it or choose another directory", dir, err)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("haproxy: refusing state dir %s: it is writable by others (mode %o); "+
			"run chmod 700 on it, or remove it or choose another directory", dir, fi.Mode().Perm())
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("haproxy: state dir %s: %w", dir, err)
		}
	}
	return nil
}

// ownedByUs reports an error when fi (of path) belongs to another user.
func ownedByUs(path string, fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner information", path)
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("%s is owned by uid %d, not by this process (uid %d)", path, st.Uid, uid)
	}
	return nil
}

// checkOwnSocket refuses a socket path that exists and is not a socket owned
// by us: the provider would send its commands (and trust the replies) to
// whoever listens there. A missing socket is fine (nothing runs yet).
func checkOwnSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("haproxy: socket %s: %w", path, err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("haproxy: refusing %s: not a socket (mode %s)", path, fi.Mode())
	}
	if err := ownedByUs(path, fi); err != nil {
		return fmt.Errorf("haproxy: refusing to attach: %w", err)
	}
	return nil
}

// writeFileAtomic replaces path with data: a new temporary file in the same
// directory (exclusive create under a random name, so a planted file or
// symlink is never followed or overwritten), synced, renamed over path, and
// the directory synced, so that a crash leaves the old or the new file,
// never a torn one. Mode 0644: an HAProxy running as another user (when the
// provider attaches to it) must read the configuration; it holds no secret.
func writeFileAtomic(path string, data []byte) (err error) {
	dir, base := filepath.Split(path)
	f, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return fmt.Errorf("haproxy: write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("haproxy: write %s: %w", path, err)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
