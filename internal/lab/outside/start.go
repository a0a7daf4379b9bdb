package outside

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
)

// Client is a started client process.
type Client struct {
	proc *netlab.Process
	log  *os.File
	out  string
}

// Start starts the client in ns, sending rate requests per second to
// target: exe (the lab's binary) re-executed as `lab outside-client`,
// through net (the supervisor: Lab.Close stops it if the caller cannot).
// Its counts go to dir/outside-client.json, its log to
// dir/outside-client.log.
func Start(net *netlab.Lab, ns *netlab.Netns, exe, dir, target string, rate int) (*Client, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("outside client: %w", err)
	}
	c := &Client{out: filepath.Join(dir, "outside-client.json")}
	_ = os.Remove(c.out) // an earlier run's counts are not this one's
	log, err := os.Create(filepath.Join(dir, "outside-client.log"))
	if err != nil {
		return nil, fmt.Errorf("outside client: %w", err)
	}
	c.log = log
	c.proc, err = net.Start(ns, log, log, exe, "lab", Command, "--target", target, "--rate", strconv.Itoa(rate), "--out", c.out)
	if err != nil {
		log.Close()
		return nil, fmt.Errorf("outside client: %w", err)
	}
	return c, nil
}

// Stop ends the client's schedule (SIGTERM), waits for it to write its
// counts (its requests under way finish within their timeout) and returns
// them.
func (c *Client) Stop() (Counts, error) {
	defer c.log.Close()
	c.proc.Signal(syscall.SIGTERM)
	select {
	case <-c.proc.Done():
	case <-time.After(stopGrace(DefaultTimeout)):
	}
	_ = c.proc.Stop()
	if code := c.proc.ExitCode(); code != 0 {
		return Counts{}, fmt.Errorf("outside client: exit status %d (its log: %s)", code, c.log.Name())
	}
	return ReadCounts(c.out)
}
