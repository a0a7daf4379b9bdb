package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// DefaultTimeout bounds one probe: under the kubelet's default probe
// timeout (1 s) is too tight for a loaded node, so the chart gives its exec
// probes timeoutSeconds 3 and this 2 s, to answer before the kubelet gives
// up.
const DefaultTimeout = 2 * time.Second

// Run is `zerodrop probe [--socket PATH] [--timeout D] PATH`: GET PATH
// (/healthz, /readyz) on the process' probe socket, print the answer, and
// exit 0 when it is 200 OK, 1 otherwise (no answer within the timeout
// included), 2 on a usage error. It is what a host-network pod's exec
// probe runs, in the container whose process serves the socket.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("zerodrop probe", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "", "the unix socket the process serves its probes on (its --health-probe-socket)")
	timeout := fs.Duration("timeout", DefaultTimeout, "give up (exit 1) when no answer comes within this time; keep it under the probe's timeoutSeconds")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: zerodrop probe --socket PATH [--timeout D] /healthz|/readyz")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *socket == "" || fs.NArg() != 1 || !strings.HasPrefix(fs.Arg(0), "/") || *timeout <= 0 {
		fs.Usage()
		return 2
	}
	status, body, err := Get(ctx, *socket, fs.Arg(0), *timeout)
	if err != nil {
		fmt.Fprintf(stdout, "%s: %v\n", fs.Arg(0), err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %d %s\n", fs.Arg(0), status, body)
	if status != http.StatusOK {
		return 1
	}
	return 0
}

// Get asks the probe socket for path and returns the answer's status and
// (the first KiB of) its body.
func Get(ctx context.Context, socket, path string, timeout time.Duration) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://probe"+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if err != nil {
		return 0, "", fmt.Errorf("read the answer: %w", err)
	}
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}
