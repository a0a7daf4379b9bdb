package haproxy

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCopyLog: everything HAProxy writes reaches the container's output;
// the state directory's copy keeps its alerts, notices and the master's
// "Loading failure!" but not the warnings a reload writes per proxy and
// server, and it is bounded — past the limit it moves to haproxy.log.1 and
// the newest lines are in haproxy.log.
func TestCopyLog(t *testing.T) {
	dir := t.TempDir()
	var in bytes.Buffer
	warning := "[WARNING]  (7) : Paused proxy zd:ns.svc:tcp-80.\n"
	alert := "[ALERT]    (8) : Binding [haproxy.cfg:9] for frontend zd:ns.svc:tcp-80: cannot bind socket (Address already in use) for [127.0.0.1:80]" + strings.Repeat(".", 60) + "\n"
	long := "[ALERT]    (8) : " + strings.Repeat("y", 100<<10) + "\n" // longer than the reader's buffer
	n := 2*containerLogLimit/len(alert) + 7
	for i := 0; i < n; i++ {
		in.WriteString(warning)
		in.WriteString(alert)
	}
	in.WriteString(long)
	in.WriteString("[WARNING]  (8) : Loading failure!\n")
	in.WriteString("[NOTICE]   (8) : last")
	total := in.Len()
	var out bytes.Buffer
	if err := CopyLog(dir, &in, &out); err != nil {
		t.Fatal(err)
	}
	if out.Len() != total {
		t.Errorf("container output got %d bytes, want all %d", out.Len(), total)
	}
	var kept string
	for _, name := range []string{"haproxy.log.1", "haproxy.log"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > containerLogLimit {
			t.Errorf("%s is %d bytes, over the bound %d", name, len(data), containerLogLimit)
		}
		if strings.Contains(string(data), "[WARNING]  (7)") {
			t.Errorf("%s has the reload's warnings", name)
		}
		kept = string(data)
	}
	if !strings.HasSuffix(kept, alert+long[:4<<10-1]+"\n[WARNING]  (8) : Loading failure!\n[NOTICE]   (8) : last\n") {
		t.Errorf("haproxy.log does not end with the last alerts (a long one cut at 4 KiB), the verdict and the last notice: ...%q", kept[max(0, len(kept)-300):])
	}
}
