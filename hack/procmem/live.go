package main

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"zerodrop.dev/zerodrop/internal/testutil"
)

// endpointReply is what every live endpoint answers: a connection through a
// frontend that reads it reached an endpoint, not a listener of its own.
const endpointReply = "procmem endpoint"

// endpoints listens at every endpoint's loopback address (the
// --backend-address-map image of its published address), one listener per
// endpoint as one pod per endpoint would, and answers each connection with
// endpointReply: HAProxy's checks pass and a client through a frontend
// reaches an endpoint.
type liveEndpoints struct {
	mu       sync.Mutex
	lns      []net.Listener
	accepted atomic.Int64
	wg       sync.WaitGroup
}

// listenEndpoints starts the listeners of n endpoints (k-th: endpointIP(k)).
func listenEndpoints(n int) (*liveEndpoints, error) {
	e := &liveEndpoints{}
	for k := 0; k < n; k++ {
		if err := e.listen(k); err != nil {
			e.close()
			return nil, err
		}
	}
	return e, nil
}

// listen starts endpoint k's listener; a nil e (nothing listens) starts
// none.
func (e *liveEndpoints) listen(k int) error {
	if e == nil {
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(endpointLoopback(k), "8080"))
	if err != nil {
		return fmt.Errorf("endpoint %d: %w", k, err)
	}
	e.mu.Lock()
	e.lns = append(e.lns, ln)
	e.mu.Unlock()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.accepted.Add(1)
			// Best effort: a health check closes at once.
			_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			_, _ = c.Write([]byte(endpointReply + "\n"))
			_ = c.Close()
		}
	}()
	return nil
}

func (e *liveEndpoints) close() {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ln := range e.lns {
		_ = ln.Close()
	}
	e.wg.Wait()
}

// endpointIP is the k-th endpoint's published address, 250 to a /24 from
// 198.18.0.1 on, through 198.19.255.250 (k below 128,000);
// endpointLoopback its image on this machine (--backend-address-map
// 198.18.0.0/15=127.18.0.0/15).
func endpointIP(k int) string { return endpointAddr(198, k) }

func endpointLoopback(k int) string { return endpointAddr(127, k) }

func endpointAddr(first, k int) string {
	b := 18<<8 + k/250
	return fmt.Sprintf("%d.%d.%d.%d", first, b>>8, b&255, k%250+1)
}

// reachAll connects to port 80 of every Service's frontend address but
// those in skip, reads the answer and retries those that did not reach an
// endpoint, until each has or until deadline; it returns when the last one
// did and how many never did. At most 32 connections are open at once, and
// each Service is tried at most once every 200 ms.
func reachAll(n int, skip map[int]bool, deadline time.Time) (lastOK time.Time, failed int, firstErr string) {
	var pending []int
	for i := 0; i < n; i++ {
		if !skip[i] {
			pending = append(pending, i)
		}
	}
	for len(pending) > 0 && time.Now().Before(deadline) {
		round := time.Now()
		var mu sync.Mutex
		var again []int
		firstErr = ""
		_ = testutil.Parallel(len(pending), 32, func(j int) error {
			i := pending[j]
			err := reach(address(i))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				again = append(again, i)
				if firstErr == "" {
					firstErr = fmt.Sprintf("%s (%s): %v", name(i), address(i), err)
				}
			} else {
				lastOK = time.Now()
			}
			return nil
		})
		pending = again
		if len(pending) > 0 {
			time.Sleep(time.Until(round.Add(200 * time.Millisecond)))
		}
	}
	return lastOK, len(pending), firstErr
}

// reach connects to addr:80 and reads one line: an endpoint's answer.
func reach(addr string) error {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, "80"), 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if strings.TrimSpace(line) != endpointReply {
		return fmt.Errorf("answered %q, not an endpoint", strings.TrimSpace(line))
	}
	return nil
}

// checkReach tries every frontend but held's once the build or restart is
// done (with -live, in the data-plane role: the other roles' addresses are
// the controller's to pick) and says when the last one
// reached an endpoint, counted from started (the process's start); it
// tries for at most two minutes more. Empty when nothing is tried.
func checkReach(started time.Time, held map[int]bool) string {
	if !*live || *role != "data-plane" {
		return ""
	}
	last, failed, firstErr := reachAll(*services, held, time.Now().Add(2*time.Minute))
	n := *services - len(held)
	if failed > 0 {
		reachFailures += failed
		return fmt.Sprintf("%d of %d frontends never reached an endpoint within 2 min (%s)", failed, n, firstErr)
	}
	return fmt.Sprintf("every frontend (%d; %d held, see -refused) reached an endpoint %s after the process started", n, len(held), last.Sub(started).Round(100*time.Millisecond))
}

// reachFailures counts frontends that never reached an endpoint: the run
// fails with them, after its report.
var reachFailures int

// liveEndpointsHere says whether the endpoints listen: with -live, in a role
// with an HAProxy (the control role has none to check or carry them).
func liveEndpointsHere() bool { return *live && *role != "control" }
