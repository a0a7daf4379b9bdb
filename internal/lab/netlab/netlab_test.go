package netlab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"zerodrop.dev/zerodrop/internal/testutil"
)

// The test binary doubles as the processes the tests start in namespaces:
// NETLAB_HELPER=http serves HTTP on NETLAB_ADDR answering the caller's
// address.
func TestMain(m *testing.M) {
	if os.Getenv("NETLAB_HELPER") == "http" {
		helperHTTP()
	}
	os.Exit(m.Run())
}

func helperHTTP() {
	ln, err := net.Listen("tcp", os.Getenv("NETLAB_ADDR"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	err = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "peer=%s", r.RemoteAddr)
	}))
	fmt.Fprintln(os.Stderr, err)
	os.Exit(2)
}

// startHTTP starts the HTTP helper inside ns.
func startHTTP(l *Lab, ns *Netns, addr string) (*Process, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// The namespace in its arguments lets the process checks find it.
	return l.Start(ns, os.Stderr, os.Stderr, "env", "NETLAB_HELPER=http", "NETLAB_ADDR="+addr, self, "netns="+ns.Name)
}

// get does one HTTP GET through dial, with a fresh connection.
func get(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), url string) (int, string, error) {
	c := &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}, Timeout: 5 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("netlab tests make network namespaces and need root")
	}
}

func newLab(t *testing.T, nodes int) *Lab {
	t.Helper()
	l, err := New(context.Background(), Config{Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close lab: %v", err)
		}
	})
	return l
}

// TestTopology: a server in a pod on node 1 is reached, without NAT, from a
// pod on node 2, from node 2 itself and from a host on the fabric, all dialled
// from the root namespace through the namespace-aware dialer.
func TestTopology(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	l := newLab(t, 2)
	server, err := l.AddPod(ctx, l.Nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	client, err := l.AddPod(ctx, l.Nodes[1])
	if err != nil {
		t.Fatal(err)
	}
	host, err := l.AddHost(ctx, "client")
	if err != nil {
		t.Fatal(err)
	}
	// A host queues connections of a closing listener onto another of its
	// port (the data-plane hand-over's node prerequisite); the root
	// namespace keeps its own value.
	if err := host.Netns.Run(ctx, "sh", "-c", "test \"$(cat /proc/sys/net/ipv4/tcp_migrate_req)\" = 1"); err != nil {
		t.Errorf("host's net.ipv4.tcp_migrate_req is not 1: %v", err)
	}
	if !l.Nodes[0].PodCIDR.Contains(server.IP) || !l.Nodes[1].PodCIDR.Contains(client.IP) {
		t.Fatalf("pod IPs %s, %s outside their nodes' CIDRs %s, %s", server.IP, client.IP, l.Nodes[0].PodCIDR, l.Nodes[1].PodCIDR)
	}
	if _, err := startHTTP(l, server.Netns, "0.0.0.0:8080"); err != nil {
		t.Fatal(err)
	}
	url := "http://" + net.JoinHostPort(server.IP.String(), "8080") + "/"
	for _, from := range []struct {
		name string
		ns   *Netns
		ip   string
	}{
		{"pod on node 2", client.Netns, client.IP.String()},
		{"node 2", l.Nodes[1].Netns, l.Nodes[1].IP.String()},
		{"fabric host", host.Netns, host.IP.String()},
	} {
		var code int
		var body string
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, body, err = get(ctx, from.ns.DialContext, url)
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond) // the server process may still be starting
		}
		if err != nil {
			t.Fatalf("from %s: GET %s: %v", from.name, url, err)
		}
		if code != http.StatusOK || !strings.HasPrefix(body, "peer="+from.ip+":") {
			t.Errorf("from %s: GET %s = %d %q, want 200 from peer %s (no NAT)", from.name, url, code, body, from.ip)
		}
	}
	// The pod's address exists only in the lab's namespaces: inside the
	// server's own namespace it is local, and a pod's namespace has no route
	// out of the lab (its only route is the node's bridge).
	if err := server.Run(ctx, "sh", "-c", "ip -o addr show dev eth0 | grep -q 'inet "+server.IP.String()+"/'"); err != nil {
		t.Errorf("pod address not on the pod's eth0: %v", err)
	}
}

// snapshot is what the lab may touch in the root namespace.
type snapshot map[string]string

func takeSnapshot(t *testing.T) snapshot {
	t.Helper()
	s, err := testutil.RootState(NamePrefix)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// build makes a full topology with processes, a forwarder and a host, and
// returns the first error (a failing hook stops it halfway).
func build(ctx context.Context, hook func(string) error) (*Lab, error) {
	l, err := New(ctx, Config{Nodes: 2, testHook: hook})
	if err != nil {
		return nil, err
	}
	for _, n := range l.Nodes {
		p, err := l.AddPod(ctx, n)
		if err != nil {
			return l, err
		}
		if _, err := startHTTP(l, p.Netns, "0.0.0.0:8080"); err != nil {
			return l, err
		}
	}
	if _, err := l.Forward(l.Nodes[0].Netns, "127.0.0.1:0", "127.0.0.1:1"); err != nil {
		return l, err
	}
	if _, err := l.AddHost(ctx, "client"); err != nil {
		return l, err
	}
	return l, nil
}

// TestTeardownLeavesNothing: after Close, the root namespace's namespaces,
// links, routes, nftables ruleset, sysctls and the processes the lab started
// are as before, after a complete setup and after setups failing halfway.
func TestTeardownLeavesNothing(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	for _, failAt := range []string{"", "netns node2", "node 2 links", "node 2 ip_forward", "node 2 route to 198.19.1.0/24", "pod 2 links", "host client links"} {
		t.Run("fail at "+failAt, func(t *testing.T) {
			before := takeSnapshot(t)
			injected := errors.New("injected failure")
			var hook func(string) error
			if failAt != "" {
				hook = func(step string) error {
					if step == failAt {
						return injected
					}
					return nil
				}
			}
			l, err := build(ctx, hook)
			if failAt == "" && err != nil {
				t.Fatal(err)
			}
			if failAt != "" && !errors.Is(err, injected) {
				t.Fatalf("setup error %v, want the injected failure at %q", err, failAt)
			}
			if l != nil {
				// Something was made: the snapshot must see it, or the final
				// comparison would prove nothing.
				if during := takeSnapshot(t); during["ip netns list"] == before["ip netns list"] {
					t.Fatalf("the lab's namespaces do not show in ip netns list:\n%s", during["ip netns list"])
				}
				if err := l.Close(); err != nil {
					t.Fatalf("close: %v", err)
				}
				if err := l.Close(); err != nil {
					t.Fatalf("second close: %v", err)
				}
			}
			after := takeSnapshot(t)
			if d := cmp.Diff(before, after); d != "" {
				t.Errorf("root namespace changed by the lab (-before +after):\n%s", d)
			}
		})
	}
}

// TestRemoveStale: namespaces of a run whose process is gone are removed;
// those of a live run are kept.
func TestRemoveStale(t *testing.T) {
	requireRoot(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%s-%d-test-node1", NamePrefix, dead.Process.Pid)
	live := newLab(t, 1)
	if _, err := runIP("netns", "add", stale); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = deleteNetns(stale) })
	if err := RemoveStale(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/netns/" + stale); !os.IsNotExist(err) {
		t.Errorf("stale namespace %s of the exited pid %d is still there (%v)", stale, dead.Process.Pid, err)
	}
	if _, err := os.Stat("/run/netns/" + live.Fabric.Name); err != nil {
		t.Errorf("RemoveStale removed a live run's namespace: %v", err)
	}
}
