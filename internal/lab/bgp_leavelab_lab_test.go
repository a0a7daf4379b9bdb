package lab

// The lab behind FRR as the BGP tests reach it (the node leaving and
// failing, the restarts): the router's namespace and next hops, the nodes,
// the client and the test's own WebSockets through the router.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/lab/worlds/dataplane"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// leaveLab is what the test reaches of the lab: the router's namespace,
// the data-plane nodes' namespaces by address, the client's namespace and
// address, the Service's frontend, and the API.
type leaveLab struct {
	router   string
	nodes    map[netip.Addr]string // node address -> namespace
	names    map[netip.Addr]string // node address -> Node name
	client   *netlab.Netns
	clientIP netip.Addr
	frontend netip.AddrPort
	kube     kubernetes.Interface
}

var trafficStartRE = regexp.MustCompile(`traffic start frontend=(\S+) netns=(\S+)`)

// openLeaveLab finds the lab's parts from its progress and its namespaces.
func openLeaveLab(ctx context.Context, progress, workDir string) (*leaveLab, error) {
	m := trafficStartRE.FindStringSubmatch(progress)
	if m == nil {
		return nil, fmt.Errorf("no traffic start line")
	}
	l := &leaveLab{nodes: map[netip.Addr]string{}, names: map[netip.Addr]string{}, client: &netlab.Netns{Name: m[2]}}
	var err error
	if l.frontend, err = netip.ParseAddrPort(m[1]); err != nil {
		return nil, err
	}
	if l.router, _, err = labRouter(); err != nil {
		return nil, err
	}
	prefix := strings.TrimSuffix(l.router, "-router")
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix+"-lb")
		if !ok {
			continue
		}
		i := 0 // "lb" is the first load-balancer host, "lbK" the K-th
		if rest != "" {
			k, err := strconv.Atoi(rest)
			if err != nil {
				continue
			}
			i = k - 1
		}
		ip, err := eth0Addr(ctx, e.Name())
		if err != nil {
			return nil, err
		}
		l.nodes[ip], l.names[ip] = e.Name(), cluster.HostNodeName(i)
	}
	if l.clientIP, err = eth0Addr(ctx, l.client.Name); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(workDir, "kubeconfig"))
	if err != nil {
		return nil, err
	}
	if l.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return l, nil
}

// eth0Addr is the IPv4 address of eth0 in namespace ns.
func eth0Addr(ctx context.Context, ns string) (netip.Addr, error) {
	var links []struct {
		AddrInfo []struct {
			Family string `json:"family"`
			Local  string `json:"local"`
		} `json:"addr_info"`
	}
	out, err := supervisor.Output(ctx, supervisor.Command{Name: "ip", Args: []string{"-n", ns, "-j", "addr", "show", "dev", "eth0"}})
	if err != nil {
		return netip.Addr{}, err
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return netip.Addr{}, fmt.Errorf("%s: %w", ns, err)
	}
	for _, l := range links {
		for _, a := range l.AddrInfo {
			if a.Family == "inet" {
				return netip.ParseAddr(a.Local)
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("%s: eth0 has no IPv4 address", ns)
}

// label puts the exclusion label on node's Node, or takes it off.
func (l *leaveLab) label(ctx context.Context, node netip.Addr, on bool) error {
	value := "null"
	if on {
		value = `"true"`
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, model.LabelExcludeFromLB, value)
	_, err := l.kube.CoreV1().Nodes().Patch(ctx, l.names[node], types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// order is the router's next hops for the frontend, in the kernel's order.
func (l *leaveLab) order(ctx context.Context) ([]netip.Addr, error) {
	return dataplane.RouteOrder(ctx, l.router, l.frontend.Addr())
}

// waitOrder polls the router's next hops every 100 ms until ok says so
// or within has passed: what it read last, when that read ended, and
// whether ok said so.
func (l *leaveLab) waitOrder(ctx context.Context, within time.Duration, ok func([]netip.Addr) bool) ([]netip.Addr, time.Time, bool) {
	got, seen, done := l.waitOrderSpan(ctx, within, ok)
	return got, seen.by, done
}

// orderSpan brackets when the router's kernel changed: after the start of
// the last read that did not satisfy ok (or the wait's start) and by the
// end of the first that did. A read is two `ip -j` commands, which take
// tens to hundreds of milliseconds on a loaded machine, so the end of the
// read alone can be late by that much plus the poll's sleep.
type orderSpan struct{ after, by time.Time }

// waitOrderSpan is waitOrder with the span the change happened in.
func (l *leaveLab) waitOrderSpan(ctx context.Context, within time.Duration, ok func([]netip.Addr) bool) ([]netip.Addr, orderSpan, bool) {
	deadline := time.Now().Add(within)
	var last []netip.Addr
	after := time.Now()
	for ctx.Err() == nil && time.Now().Before(deadline) {
		start := time.Now()
		got, err := l.order(ctx)
		if err == nil {
			last = got
			if ok(got) {
				return got, orderSpan{after: after, by: time.Now()}, true
			}
			after = start
		}
		time.Sleep(100 * time.Millisecond)
	}
	now := time.Now()
	return last, orderSpan{after: now, by: now}, false
}

// flow is one of the test's WebSockets and the node that holds it.
type flow struct {
	port uint16
	c    *websocket.Conn
	node netip.Addr
}

// openFlows opens n WebSockets from the client's namespace to the
// frontend's /ws (the workload's pods echo) and reads which node holds
// each.
func (l *leaveLab) openFlows(ctx context.Context, n int) ([]*flow, error) {
	flows := make([]*flow, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			f := &flow{}
			hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
				DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := l.client.DialContext(ctx, network, addr)
					if err == nil {
						f.port = uint16(c.LocalAddr().(*net.TCPAddr).Port)
					}
					return c, err
				}}}
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(dctx, "ws://"+l.frontend.String()+"/ws", &websocket.DialOptions{HTTPClient: hc, CompressionMode: websocket.CompressionDisabled})
			f.c, flows[i], errs[i] = c, f, err
		})
	}
	wg.Wait()
	var out []*flow
	for i, f := range flows {
		if errs[i] == nil {
			out = append(out, f)
		}
	}
	if len(out) < n*9/10 {
		closeFlows(out)
		return nil, fmt.Errorf("only %d of %d WebSockets opened (first error among the rest: %v)", len(out), n, firstErr(errs))
	}
	held, err := dataplane.HeldBy(ctx, l.nodes, l.clientIP, l.frontend)
	if err != nil {
		closeFlows(out)
		return nil, err
	}
	for _, f := range out {
		f.node = held[f.port]
	}
	return out, nil
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func closeFlows(flows []*flow) {
	for _, f := range flows {
		_ = f.c.CloseNow()
	}
}

// pingAll sends one message on every flow at once and says which got its
// echo within 3 s (a flow the router moved to another node is reset by
// that node; one on a dead node is not answered).
func pingAll(ctx context.Context, flows []*flow) map[*flow]bool {
	out := map[*flow]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, f := range flows {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			msg := "ping " + strconv.Itoa(i)
			ok := f.c.Write(pctx, websocket.MessageText, []byte(msg)) == nil
			if ok {
				_, b, err := f.c.Read(pctx)
				ok = err == nil && string(b) == msg
			}
			mu.Lock()
			out[f] = ok
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// tally is a phase's flows per node: those that answered before the
// event, and which of them broke after it, beside hash-threshold's
// prediction for the router's next hops before and after.
func tally(p *phaseFigures, flows []*flow, okBefore, okAfter map[*flow]bool) {
	moved := dataplane.HashThresholdMoved(p.Before, p.After)
	byNode := map[netip.Addr]*nodeFlows{}
	for i, h := range p.Before {
		byNode[h] = &nodeFlows{Node: h, Position: i, Predicted: moved[h]}
	}
	for _, f := range flows {
		nf := byNode[f.node]
		switch {
		case !okBefore[f]:
			p.BrokenBefore++
		case nf == nil:
			p.Unknown++
		default:
			nf.Flows++
			if !okAfter[f] {
				nf.Broken++
			}
		}
	}
	for _, h := range p.Before {
		p.Nodes = append(p.Nodes, *byNode[h])
	}
}
