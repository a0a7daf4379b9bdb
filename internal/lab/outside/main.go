package outside

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// Command is the hidden `zerodrop lab` subcommand that is the client:
// `zerodrop lab outside-client --target HOST:PORT --rate N --out FILE`.
const Command = "outside-client"

// Main is the client's process: it runs the schedule until SIGTERM or
// SIGINT (or its bounds), waits for the requests under way and writes its
// counts to --out as JSON (through a temporary file renamed into place, so
// a reader never sees half of it). The exit status is 2 for a usage error,
// 1 when the counts cannot be written.
func Main(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("zerodrop lab "+Command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	var out string
	fs.StringVar(&cfg.Target, "target", "", "HOST:PORT to send GET / to")
	fs.IntVar(&cfg.Rate, "rate", 0, "requests started per second (each on a new connection)")
	fs.DurationVar(&cfg.Timeout, "timeout", DefaultTimeout, "bound of one request, connection included")
	fs.Int64Var(&cfg.MaxRequests, "max-requests", 0, "stop after this many requests (0: rate times --max-duration)")
	fs.DurationVar(&cfg.MaxDuration, "max-duration", MaxDuration, "stop after this long (at most "+MaxDuration.String()+")")
	fs.StringVar(&out, "out", "", "write the counts (JSON) to `FILE`")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if cfg.Target == "" || out == "" || cfg.Rate < 1 || cfg.Rate > 5000 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "zerodrop lab "+Command+": want --target HOST:PORT, --rate 1 to 5000 and --out FILE")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	counts := Run(ctx, cfg)
	if err := WriteCounts(out, counts); err != nil {
		fmt.Fprintf(stderr, "zerodrop lab %s: %v\n", Command, err)
		return 1
	}
	fmt.Fprintf(stderr, "zerodrop lab %s: %d sent, %d failed %v, to %s\n", Command, counts.Sent, counts.Failed, counts.FailedByKind, counts.Target)
	return 0
}

// WriteCounts writes c to path as JSON, atomically.
func WriteCounts(path string, c Counts) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("the counts: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("the counts: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("the counts: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("the counts: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("the counts: %w", err)
	}
	return nil
}

// ReadCounts reads what WriteCounts wrote.
func ReadCounts(path string) (Counts, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Counts{}, fmt.Errorf("the outside client's counts: %w", err)
	}
	var c Counts
	if err := json.Unmarshal(b, &c); err != nil {
		return Counts{}, fmt.Errorf("the outside client's counts %s: %w", path, err)
	}
	return c, nil
}

// stopGrace is how long Stop waits for the client after its signal: its
// requests under way end within their timeout.
func stopGrace(timeout time.Duration) time.Duration { return timeout + 10*time.Second }
