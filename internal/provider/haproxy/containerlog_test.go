package haproxy

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCopyLog: everything HAProxy writes reaches the container's output,
// and the state directory's copy is bounded — past the limit it moves to
// haproxy.log.1 and the newest lines are in haproxy.log.
func TestCopyLog(t *testing.T) {
	dir := t.TempDir()
	line := strings.Repeat("x", 99) + "\n"
	var in bytes.Buffer
	n := 3*containerLogLimit/len(line) + 7
	for i := 0; i < n; i++ {
		in.WriteString(line)
	}
	in.WriteString("[ALERT]    (1) : last\n")
	var out bytes.Buffer
	if err := CopyLog(dir, &in, &out); err != nil {
		t.Fatal(err)
	}
	if want := n*len(line) + len("[ALERT]    (1) : last\n"); out.Len() != want {
		t.Errorf("container output got %d bytes, want %d", out.Len(), want)
	}
	for _, name := range []string{"haproxy.log", "haproxy.log.1"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > containerLogLimit {
			t.Errorf("%s is %d bytes, over the bound %d", name, st.Size(), containerLogLimit)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "haproxy.log"))
	if err != nil || !strings.HasSuffix(string(data), "[ALERT]    (1) : last\n") {
		t.Errorf("haproxy.log does not end with the last line written (err %v)", err)
	}
}
