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
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	o.Logger.Info("serving", "address", ln.Addr().String(), "target", o.Target, "pod", o.Pod)
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
