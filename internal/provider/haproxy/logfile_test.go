package haproxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

// TestRotateLogKeepsTheMastersDescriptor: the master holds its log open
// for its whole life, as process.go opens it (O_APPEND, inherited). A log
// past LogMaxBytes moves to haproxy.log.1 and the master's next lines
// land at the start of the emptied haproxy.log — not in the copy, and not
// after a hole as long as the old content.
func TestRotateLogKeepsTheMastersDescriptor(t *testing.T) {
	for _, tc := range []struct {
		name        string
		limit       int64
		wantRotated bool
	}{
		{"past the limit", 1000, true},
		{"under the limit", 1 << 20, false},
		{"never", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "haproxy.log")
			master, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer master.Close()
			old := strings.Repeat("[WARNING] a proxy paused\n", 100) // 2,500 bytes
			if _, err := master.WriteString(old); err != nil {
				t.Fatal(err)
			}
			p := &Provider{paths: paths{dir: dir, log: log}, opts: Options{LogMaxBytes: tc.limit}, log: logr.Discard()}
			p.rotateLog()
			if _, err := master.WriteString("[ALERT] after\n"); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(log)
			if err != nil {
				t.Fatal(err)
			}
			copied, cerr := os.ReadFile(log + ".1")
			if !tc.wantRotated {
				if string(got) != old+"[ALERT] after\n" || cerr == nil {
					t.Fatalf("log %d bytes, copy error %v; want the log untouched (%d bytes) and no copy", len(got), cerr, len(old)+14)
				}
				return
			}
			if string(got) != "[ALERT] after\n" {
				t.Errorf("log after rotation = %d bytes %q...; want only the master's next line", len(got), got[:min(len(got), 40)])
			}
			if string(copied) != old {
				t.Errorf("haproxy.log.1 = %d bytes (err %v); want the old %d bytes", len(copied), cerr, len(old))
			}
			if got := p.logTail(); got != "[ALERT] after" {
				t.Errorf("logTail = %q", got)
			}
		})
	}
}

// TestLogTailReadsTheEndOnly: the tail of a large log is its last 2,000
// bytes.
func TestLogTailReadsTheEndOnly(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "haproxy.log")
	if err := os.WriteFile(log, []byte(strings.Repeat("x", 10000)+"\n[ALERT] last\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &Provider{paths: paths{dir: dir, log: log}}
	got := p.logTail()
	if !strings.HasSuffix(got, "[ALERT] last") || len(got) > 2000 {
		t.Fatalf("logTail = %d bytes ending %q", len(got), got[max(0, len(got)-20):])
	}
}
