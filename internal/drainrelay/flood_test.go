package drainrelay

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// relayArgsEnv, when set, makes the test binary run `zerodrop drain-relay`
// with these arguments (one per line) instead of the tests: the flood test
// measures the relay as a process of its own, as in its container.
const relayArgsEnv = "ZERODROP_TEST_RELAY_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(relayArgsEnv); args != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		os.Exit(Run(ctx, strings.Split(args, "\n"), os.Stderr))
	}
	os.Exit(m.Run())
}

// startRelayProcess runs the relay as a subprocess of the test binary with
// the pod's token, and returns its address and process; it is killed at
// cleanup.
func startRelayProcess(t *testing.T, target string) (string, *os.Process) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), relayArgsEnv+"="+strings.Join([]string{"--listen", "127.0.0.1:0", "--target", target, "--pod", pod,
		"--max-wait", "2m"}, "\n"), TokenEnv+"="+token)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec struct{ Msg, Address string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "serving" && rec.Address != "" {
				addr <- rec.Address
			}
		}
	}()
	select {
	case a := <-addr:
		return a, cmd.Process
	case <-time.After(time.Minute):
		t.Fatal("the relay process did not serve within a minute")
		return "", nil
	}
}

// peakRSS is the process's peak resident memory (VmHWM), in bytes.
func peakRSS(t *testing.T, p *os.Process) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

// Any pod can connect to the relay, whose container has 64 MiB: 10,000
// connections held open (half idle, half with an unfinished request) from
// one address keep the relay process under 64 MiB at its peak, and the
// kubelet's call (another address: the node's) is answered meanwhile.
func TestRelayFloodStaysUnderItsMemoryLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 connections")
	}
	if testutil.RaceEnabled {
		// The relay process is this test binary: under the race detector
		// its memory is several times the shipped binary's (78.5 MiB
		// against 27 MiB, seen), and the limit is the point. make test
		// runs this test again without it.
		t.Skip("measures the relay's memory: run without -race (make test does)")
	}
	const flood, limit = 10000, 64 << 20
	release := make(chan struct{})
	target, _ := drainServer(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		select { // drained once the flood is in place
		case <-release:
		case <-time.After(2 * time.Minute):
		case <-r.Context().Done():
			return
		}
		proven(w, r, token, http.StatusOK, "drained")
	})
	addr, proc := startRelayProcess(t, target.URL)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	d := net.Dialer{Timeout: 10 * time.Second}
	started := time.Now()
	for i := 0; i < flood; i++ {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if i%2 == 1 {
			// An unfinished request: the relay reads and waits for more.
			if _, err := fmt.Fprintf(c, "GET %s?pod=%s HTTP/1.1\r\nHost: relay\r\nX-Pad: %s\r\n", drain.Path, pod, strings.Repeat("x", 2000)); err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
		}
		if time.Since(started) > 3*time.Minute {
			t.Fatalf("only %d connections in 3 minutes", i)
		}
	}
	t.Logf("%d connections opened in %s", flood, time.Since(started).Round(time.Millisecond))
	// The kubelet's call, from the node's address.
	kubelet := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}, Timeout: time.Minute}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+drain.Path+"?pod="+pod, nil)
	req.Header.Set(TokenHeader, token)
	answered := make(chan error, 1)
	go func() {
		resp, err := kubelet.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get(drain.ResultHeader) != "drained" {
				err = fmt.Errorf("answered %d %q, want 200 drained", resp.StatusCode, resp.Header.Get(drain.ResultHeader))
			}
		}
		answered <- err
	}()
	time.Sleep(time.Second) // the kubelet's call held among the flood
	close(release)
	if err := <-answered; err != nil {
		t.Errorf("the kubelet's call during the flood: %v", err)
	}
	peak := peakRSS(t, proc)
	t.Logf("relay process peak RSS %.1f MiB with %d connections opened", float64(peak)/(1<<20), flood)
	if peak >= limit {
		t.Errorf("relay process peak RSS %.1f MiB, want under its container's 64 MiB limit", float64(peak)/(1<<20))
	}
}
