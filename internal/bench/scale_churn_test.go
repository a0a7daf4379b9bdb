package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// churnTimeout is how long a changed endpoint may take to serve before the
// change counts as not served.
const churnTimeout = time.Minute

// churner owns the endpoints that do listen: slot 0 of every churned
// Service, a new address for every change (in 198.19.0.0/16, published as
// 127.19.0.0/16), each an HTTP server that answers with its address.
type churner struct {
	mu      sync.Mutex
	gen     int
	servers []*http.Server
}

func newChurner(b *testing.B) *churner {
	ch := &churner{}
	b.Cleanup(func() {
		ch.mu.Lock()
		defer ch.mu.Unlock()
		for _, s := range ch.servers {
			_ = s.Close()
		}
	})
	return ch
}

// listen starts the next endpoint and returns its published address.
func (ch *churner) listen() (string, error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	g := ch.gen
	ch.gen++
	addr := fmt.Sprintf("198.19.%d.%d", g/250, g%250+1)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.19.%d.%d:8080", g/250, g%250+1))
	if err != nil {
		return "", fmt.Errorf("endpoint %s: %w", addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, addr) })}
	go func() { _ = srv.Serve(ln) }()
	ch.servers = append(ch.servers, srv)
	return addr, nil
}

// initialSlice is Service i's first EndpointSlice: static endpoints, and for
// a churned Service one that listens in slot 0.
func (ch *churner) initialSlice(i int) (*discoveryv1.EndpointSlice, error) {
	addrs := make([]string, *scaleEndpoints)
	for j := range addrs {
		addrs[j] = staticAddr(i, j)
	}
	if i < scaleChurned {
		a, err := ch.listen()
		if err != nil {
			return nil, err
		}
		addrs[0] = a
	}
	return scaleSlice(i, addrs), nil
}

// run replaces slot 0 of the churned Services in turn, scaleChurnRate times
// a second for scaleChurnSeconds, and measures for each change how long
// until a request through HAProxy reaches the new endpoint (new
// connections every 50 ms; a new server needs its checks to pass `rise`
// times first). A Service is changed again only once its last change was
// served or timed out: a change replaced before it served could never be
// measured; a tick that finds every Service waiting is skipped. It returns
// the latencies of the served changes, the number not served within
// churnTimeout, and the changes made.
func (ch *churner) run(b *testing.B, c client.Client) ([]time.Duration, int, int) {
	b.Helper()
	ctx := context.Background()
	ips := make([]string, scaleChurned)
	for i := range ips {
		ip, err := awaitIngress(ctx, c, scaleName(i))
		if err != nil {
			b.Fatal(err)
		}
		ips[i] = ip
	}
	var (
		mu      sync.Mutex
		lat     []time.Duration
		missed  int
		wg      sync.WaitGroup
		changes int
		busy    = make([]bool, scaleChurned)
		next    int
	)
	tick := time.NewTicker(time.Second / scaleChurnRate)
	defer tick.Stop()
	for end := time.Now().Add(scaleChurnSeconds * time.Second); time.Now().Before(end); {
		<-tick.C
		i := -1
		mu.Lock()
		for k := 0; k < scaleChurned && i < 0; k++ {
			if j := (next + k) % scaleChurned; !busy[j] {
				i, busy[j], next = j, true, j+1
			}
		}
		mu.Unlock()
		if i < 0 {
			continue
		}
		changes++
		addr, err := ch.listen()
		if err != nil {
			b.Fatal(err)
		}
		var sl discoveryv1.EndpointSlice
		if err := c.Get(ctx, client.ObjectKey{Namespace: scaleNS, Name: scaleName(i)}, &sl); err != nil {
			b.Fatal(err)
		}
		sl.Endpoints[0] = discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
		t0 := time.Now()
		if err := c.Update(ctx, &sl); err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func(ip string) {
			defer wg.Done()
			d, ok := awaitServed(ip, addr, t0)
			mu.Lock()
			defer mu.Unlock()
			busy[i] = false
			if ok {
				lat = append(lat, d)
			} else {
				missed++
			}
		}(ips[i])
	}
	wg.Wait()
	return lat, missed, changes
}

var churnClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// awaitServed polls ip:80 until the endpoint addr answers, and returns the
// time since t0.
func awaitServed(ip, addr string, t0 time.Time) (time.Duration, bool) {
	for time.Since(t0) < churnTimeout {
		resp, err := churnClient.Get("http://" + net.JoinHostPort(ip, "80") + "/")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) == addr {
				return time.Since(t0), true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, false
}

// awaitIngress returns the Service's load-balancer IP once it has one.
func awaitIngress(ctx context.Context, c client.Client, name string) (string, error) {
	deadline := time.Now().Add(churnTimeout)
	for {
		var svc corev1.Service
		if err := c.Get(ctx, client.ObjectKey{Namespace: scaleNS, Name: name}, &svc); err != nil {
			return "", err
		}
		if ing := svc.Status.LoadBalancer.Ingress; len(ing) > 0 && ing[0].IP != "" {
			return ing[0].IP, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("service %s has no load-balancer IP", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// percentile is the p-th percentile (nearest rank) of ds; 0 when empty.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(i, 0)].Round(time.Millisecond)
}

// memReading is this process's memory: peak and current RSS from
// /proc/self/status, and the Go runtime's view.
type memReading struct {
	hwm, rss, heapInuse, sys uint64 // bytes
}

func readMem() memReading {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r := memReading{heapInuse: ms.HeapInuse, sys: ms.Sys}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return r
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmHWM" && k != "VmRSS") {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			continue
		}
		if k == "VmHWM" {
			r.hwm = kb << 10
		} else {
			r.rss = kb << 10
		}
	}
	return r
}

// resetPeakRSS returns freed memory to the OS and resets VmHWM (writing 5
// to clear_refs, Linux 4.0+), so that the next peak is the next phase's; it
// reports whether the reset worked.
func resetPeakRSS() bool {
	debug.FreeOSMemory()
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

func mib(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// errorLog is a logr sink that keeps the controller's error lines only, by
// message and error text, so that the bench can say what failed.
type errorLog struct {
	mu     sync.Mutex
	counts map[string]int
}

func (e *errorLog) Init(logr.RuntimeInfo)          {}
func (e *errorLog) Enabled(int) bool               { return false }
func (e *errorLog) Info(int, string, ...any)       {}
func (e *errorLog) WithValues(...any) logr.LogSink { return e }
func (e *errorLog) WithName(string) logr.LogSink   { return e }
func (e *errorLog) Error(err error, msg string, _ ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.counts == nil {
		e.counts = map[string]int{}
	}
	// Digits (names, ports, PIDs) masked: one line per kind of error.
	text := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return '#'
		}
		return r
	}, fmt.Sprint(err))
	if len(text) > 200 {
		text = text[:200] + "…"
	}
	e.counts[msg+": "+text]++
}

// take returns the errors logged since the last take, most frequent first.
func (e *errorLog) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for k, n := range e.counts {
		out = append(out, fmt.Sprintf("%d× %s", n, k))
	}
	slices.SortFunc(out, func(a, b string) int {
		na, _ := strconv.Atoi(strings.SplitN(a, "×", 2)[0])
		nb, _ := strconv.Atoi(strings.SplitN(b, "×", 2)[0])
		return nb - na
	})
	e.counts = nil
	return out
}
