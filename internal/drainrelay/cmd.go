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
	// The pod's UID, from the downward API (the webhook's fieldRef).
	o.UID = os.Getenv(UIDEnv)
	o.Logger = slog.New(slog.NewJSONHandler(stderr, nil)).With("logger", "drain-relay")
	h, err := NewHandler(o)
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop drain-relay: %v\n", err)
		return 2
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop drain-relay: %v\n", err)
		return 1
	}
	// Any pod can connect, and the relay has 64 MiB: slow or idle
	// connections must not pile up. The Handler extends the read and write
	// deadlines of the call it holds to --max-wait.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: *readTimeout, ReadTimeout: *readTimeout,
		WriteTimeout: *writeTimeout, IdleTimeout: *idleTimeout}
	o.Logger.Info("serving", "address", ln.Addr().String(), "target", o.Target, "pod", o.Pod, "uid", o.UID)
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
