package drainrelay

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"zerodrop.dev/zerodrop/internal/connguard"
)

// DefaultPort is the relay's port in the pod (the webhook's
// --webhook-drain-relay-port), the hook's target.
const DefaultPort = 15909

// Run is `zerodrop drain-relay`: it serves the relay until ctx ends (the
// kubelet's SIGTERM, sent to a sidecar only after the pod's other containers
// have stopped, so after the preStop hook), then lets a call in flight finish
// for a few seconds.
func Run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("zerodrop drain-relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", ":"+strconv.Itoa(DefaultPort), "address to serve the pod's preStop hook on")
	var o Options
	fs.StringVar(&o.Target, "target", "", "the drain Service, http://CLUSTER_IP:PORT (required)")
	fs.StringVar(&o.Pod, "pod", "", "this pod, namespace/name (required)")
	fs.DurationVar(&o.MaxWait, "max-wait", 30*time.Second, "longest a call waits, retries included: the pod's grace period")
	fs.DurationVar(&o.Retry, "retry", 250*time.Millisecond, "pause after a failed attempt")
	fs.DurationVar(&o.RefusedWindow, "refused-window", DefaultRefusedWindow, "how long after the hook's call a refusal (404) is called again")
	readTimeout := fs.Duration("read-timeout", 10*time.Second, "bound on reading a request")
	writeTimeout := fs.Duration("write-timeout", 10*time.Second, "bound on writing an answer (a call held for the pod is extended to --max-wait)")
	idleTimeout := fs.Duration("idle-timeout", 5*time.Second, "bound on a kept-alive connection between requests")
	pending := fs.Int("max-pending", 128, "connections held at once before their request is authenticated (the oldest is closed beyond)")
	pendingPerSource := fs.Int("max-pending-per-source", 16, "the same, per source address")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "zerodrop drain-relay: unexpected arguments %v\n", fs.Args())
		return 2
	}
	if *pending <= 0 || *pendingPerSource <= 0 {
		fmt.Fprintf(stderr, "zerodrop drain-relay: --max-pending %d and --max-pending-per-source %d: want more than 0\n", *pending, *pendingPerSource)
		return 2
	}
	// The pod's UID, from the downward API (the webhook's fieldRef).
	o.UID = os.Getenv(UIDEnv)
	// The pod's token, from the webhook (empty in a pod admitted before
	// tokens: then neither the hook's call nor the answer is checked).
	o.Token = os.Getenv(TokenEnv)
	o.Logger = slog.New(slog.NewJSONHandler(stderr, nil)).With("logger", "drain-relay")
	h, err := NewHandler(o)
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop drain-relay: %v\n", err)
		return 2
	}
	raw, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop drain-relay: %v\n", err)
		return 1
	}
	// Any pod can connect, and the relay has 64 MiB: slow or idle
	// connections must not pile up. The timeouts close them in time; the
	// guard bounds how many are held meanwhile (a connection is pending
	// until its request is authenticated, and the oldest pending one of a
	// source, then of all, is closed when a cap is passed, so a flood does
	// not shut out the kubelet's fresh call). The Handler extends the read
	// and write deadlines of the call it holds to --max-wait.
	ln := connguard.New(raw, connguard.Limits{Pending: *pending, PendingPerSource: *pendingPerSource, Handshake: *readTimeout})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: *readTimeout, ReadTimeout: *readTimeout,
		WriteTimeout: *writeTimeout, IdleTimeout: *idleTimeout, ConnContext: connguard.ConnContext}
	o.Logger.Info("serving", "address", ln.Addr().String(), "target", o.Target, "pod", o.Pod, "uid", o.UID, "token", o.Token != "")
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		fmt.Fprintf(stderr, "zerodrop drain-relay: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		o.Logger.Info("calls cut at shutdown", "error", err.Error())
	}
	return 0
}
