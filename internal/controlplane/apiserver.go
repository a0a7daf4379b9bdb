package controlplane

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// APIServerPID finds the kube-apiserver that serves host
// ("https://127.0.0.1:PORT/", the one this process started: envtest runs it
// as a child): its command line has --secure-port=PORT, which another API
// server on this machine cannot have.
func APIServerPID(host string) (int, error) {
	u, err := url.Parse(host)
	if err != nil {
		return 0, fmt.Errorf("API server address %q: %w", host, err)
	}
	if u.Port() == "" {
		return 0, fmt.Errorf("API server address %q has no port", host)
	}
	want := "--secure-port=" + u.Port()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if filepath.Base(args[0]) == "kube-apiserver" && slices.Contains(args, want) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no kube-apiserver runs with %s", want)
}
