package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/testutil"
	"zerodrop.dev/zerodrop/internal/version"
)

// lockedBuffer is a bytes.Buffer safe for the logger and the test at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestJSONLogs: with --log-format json every line is one JSON object, and
// the start line carries the build's version.
func TestJSONLogs(t *testing.T) {
	restCfg := controlplane.Start(t)
	dir := t.TempDir()
	t.Cleanup(func() { testutil.StopHAProxy(t, dir) })
	var out lockedBuffer
	cfg := haproxyConfig(restCfg, dir, "127.0.104.0/24")
	cfg.LogFormat, cfg.LogOutput = "json", &out
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunConfig(ctx, cfg) }()
	testutil.Eventually(t, 60*time.Second, "the start line", func() (bool, string) {
		return strings.Contains(out.String(), `"msg":"starting"`), out.String()
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("controller: %v", err)
	}
	started := false
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("not a JSON line: %q (%v)", line, err)
		}
		if obj["msg"] == "starting" {
			started = obj["version"] == version.String()
		}
	}
	if !started {
		t.Errorf("no start line with version %q:\n%s", version.String(), out.String())
	}
}
