package controlplane

import (
	"fmt"
	"net/url"
	"path/filepath"
	"slices"

	"zerodrop.dev/zerodrop/internal/supervisor"
)

// APIServerPID finds the kube-apiserver that serves host
// ("https://127.0.0.1:PORT/", the one this process started: envtest runs it
// as a child): its command line has --secure-port=PORT, which another API
// server on this machine cannot have. The process table is read by
// supervisor.Find, the project's one reader of it.
func APIServerPID(host string) (int, error) {
	u, err := url.Parse(host)
	if err != nil {
		return 0, fmt.Errorf("API server address %q: %w", host, err)
	}
	if u.Port() == "" {
		return 0, fmt.Errorf("API server address %q has no port", host)
	}
	want := "--secure-port=" + u.Port()
	pids := supervisor.Find(func(args []string) bool {
		return filepath.Base(args[0]) == "kube-apiserver" && slices.Contains(args, want)
	})
	if len(pids) == 0 {
		return 0, fmt.Errorf("no kube-apiserver runs with %s", want)
	}
	return pids[0], nil
}
