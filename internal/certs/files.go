package certs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// writeFiles puts the serving certificate where the webhook server's
// certificate watcher reads it, only when it changed. The key goes first:
// the watcher reloads on each file's change and keeps the previous pair
// while the two files do not match, so a half-written pair is never served.
func (m *Manager) writeFiles(serving *KeyPair) error {
	if err := os.MkdirAll(m.opts.CertDir, 0o700); err != nil {
		return fmt.Errorf("create certificate directory: %w", err)
	}
	if err := writeIfChanged(filepath.Join(m.opts.CertDir, m.opts.KeyName), serving.KeyPEM, 0o600); err != nil {
		return err
	}
	return writeIfChanged(filepath.Join(m.opts.CertDir, m.opts.CertName), serving.CertPEM, 0o644)
}

// writeIfChanged replaces path atomically (a temporary file renamed over
// it), so a reader never sees a truncated file.
func writeIfChanged(path string, data []byte, perm os.FileMode) error {
	old, err := os.ReadFile(path)
	if err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename this is a no-op
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
