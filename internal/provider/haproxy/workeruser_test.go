package haproxy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseWorkerUser(t *testing.T) {
	for in, want := range map[string]*WorkerUser{
		"":            nil,
		"65534:65534": {UID: 65534, GID: 65534},
		"1000:2000":   {UID: 1000, GID: 2000},
	} {
		got, err := ParseWorkerUser(in)
		if err != nil || (got == nil) != (want == nil) || (got != nil && *got != *want) {
			t.Errorf("ParseWorkerUser(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"65534":          "UID:GID",
		"nobody:nogroup": "not a number",
		"0:0":            "must not run as root",
		"65534:0":        "must not run as root",
		"-1:65534":       "not a number",
		"2147483647:1":   "not a number",
		"1:2:3":          "not a number",
	} {
		if _, err := ParseWorkerUser(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseWorkerUser(%q) error %v; want one saying %q", in, err, why)
		}
	}
}

// TestContainerArgsWorkerUser: with a worker user the master reads its
// file before zerodrop's configuration, which stays as rendered; the file
// is HAProxy's uid and gid, and goes away when the user does.
func TestContainerArgsWorkerUser(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "haproxy")
	if err := PrepareContainer(Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	_, _, config, err := Paths(dir)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(config)
	u := &WorkerUser{UID: 65534, GID: 65533}
	if err := PrepareWorkerUser(dir, u); err != nil {
		t.Fatal(err)
	}
	args, err := ContainerArgs(dir, u)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "workers.cfg")
	if i, j := slices.Index(args, file), slices.Index(args, config); i < 1 || args[i-1] != "-f" || j != i+2 || args[j-1] != "-f" {
		t.Errorf("args %q: want -f %s before -f %s", args, file, config)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "global\n    uid 65534\n    gid 65533\n") {
		t.Errorf("worker user's file:\n%s", data)
	}
	if after, _ := os.ReadFile(config); string(after) != string(before) {
		t.Error("the worker user changed zerodrop's configuration")
	}
	if err := PrepareWorkerUser(dir, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("worker user's file after the user was removed: %v", err)
	}
	if args, _ := ContainerArgs(dir, nil); slices.Contains(args, file) {
		t.Errorf("args without a worker user %q name its file", args)
	}
}
