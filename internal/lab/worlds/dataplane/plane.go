// Package dataplane is a lab run's HAProxy data plane of replicas
// (--data-plane-replicas): the arrangement the lab makes itself
// (replicas.go: an HAProxy and a `zerodrop controller --role=data-plane`
// process per load-balancer host, each with a Pod object) or the chart's
// DaemonSet pods run by the lab's kubelet (chart.go), the lab's counting
// proxies at every replica's HAProxy sockets, and the router stand-in that
// routes the client to the replicas that serve. The scenarios package makes
// one Plane per run that has a data plane, and its lb-replica-restart acts
// disrupt it.
package dataplane

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/lab/sockcount"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// Config is what a run's data plane needs of the lab and of its run.
type Config struct {
	Client kubernetes.Interface
	// REST is the API server's configuration: a replica's kubeconfig is
	// made from it, with the replica pod's token.
	REST  *rest.Config
	Net   *cluster.Network
	Agent *cluster.Agent
	// Token is the kubelet's projected token for a pod.
	Token func(ctx context.Context, pod *corev1.Pod) (string, error)
	// Executable is the zerodrop binary a replica's process runs.
	Executable string
	// LogDir receives the replicas' process logs; Dir is the run's
	// directory, under which each replica has its own.
	LogDir, Dir string
	RunID       int
	Class       string // the run's load-balancer class
	Replicas    int    // --data-plane-replicas
	// DaemonSet, when set, names the chart's DaemonSet: the data plane.
	DaemonSet string
	// Name is the run's, for log lines.
	Name string
	Logf func(format string, args ...any)
	// Mark puts an event on the run's timeline.
	Mark func(format string, args ...any)
	// FRR, when set, is the router (frr_plane.go): the lab routes nothing
	// itself.
	FRR *FRR
}

// Plane is a run's data plane of replicas.
type Plane struct {
	cfg Config

	// mu guards replicas, socks and retiredWrites: lb-replica-restart
	// replaces replicas and adds counting proxies while others read.
	mu       sync.Mutex
	replicas []*Replica
	socks    []*sockcount.Proxy // in front of every replica's HAProxy sockets
	// retiredWrites are the writes counted by proxies of data-plane pods
	// that are gone (retireReplica).
	retiredWrites int64

	// routeMu guards routed, the load-balancer hosts the client's route
	// has (installed from the chart: the router stand-in's), and the
	// router's watch of the Nodes (router.go).
	routeMu         sync.Mutex
	routed          []int
	nodes           corelisters.NodeLister // nil until the router watches
	labelledAtStart map[int]bool
	// routeRec records FRR's routes for the run (frr_routes.go); nil
	// with the stand-in.
	routeRec *routeRecorder
}

// New is the data plane of a run; Start or StartChart starts it.
func New(cfg Config) *Plane { return &Plane{cfg: cfg} }

// Replica is one data-plane replica of a run.
type Replica struct {
	index int
	gen   int // 1 for the first pod of this replica, +1 per replacement
	runID int
	host  *netlab.Host
	dir   string
	prov  *haproxy.Provider // the lab's view of the replica's HAProxy
	socks []*sockcount.Proxy
	// podName and podUID: a replica installed from the chart (chart.go) is
	// its DaemonSet pod.
	podName string
	podUID  types.UID
	// labPodUID is the UID of the Pod object the lab made for a replica of
	// its own arrangement.
	labPodUID types.UID
	// viewedAt is when the lab last attached its view of the pod's HAProxy
	// (a node's recovery attaches it again).
	viewedAt time.Time

	mu   sync.Mutex
	proc *netlab.Process // the replica's zerodrop process
	// hproc is the HAProxy (its master) of a replica of the lab's own
	// arrangement; the chart's kubelet runs a chart replica's.
	hproc *netlab.Process
	runs  int // processes started, for scrape keys and logs
}

// Index is the replica's load-balancer host, lbs[Index].
func (d *Replica) Index() int { return d.index }

// Dir is the replica's HAProxy directory.
func (d *Replica) Dir() string { return d.dir }

// Pod is the name of the replica's Pod.
func (d *Replica) Pod() string {
	if d.podName != "" {
		return d.podName
	}
	return fmt.Sprintf("data-plane-%d-%d-%d", d.runID, d.index, d.gen)
}

// Replacement is a new pod for d's replica, on the same host.
func (d *Replica) Replacement() *Replica {
	return &Replica{index: d.index, gen: d.gen + 1, runID: d.runID, host: d.host}
}

// ProcessRun is the replica's zerodrop process and how many were started,
// the last one included.
func (d *Replica) ProcessRun() (*netlab.Process, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.proc, d.runs
}

// Provider is the lab's view of the replica's HAProxy (nil: not viewed).
func (d *Replica) Provider() *haproxy.Provider {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.prov
}

// Socks are the counting proxies at the replica's HAProxy sockets.
func (d *Replica) Socks() []*sockcount.Proxy {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.socks)
}

// Landed is the writes counted at this replica's HAProxy sockets.
func (d *Replica) Landed() int64 {
	var n int64
	for _, p := range d.socks {
		n += int64(p.Counts().Writes)
	}
	return n
}

// Replicas are the run's data-plane replicas now.
func (p *Plane) Replicas() []*Replica {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.replicas)
}

// ReplicaAt is the replica on load-balancer host index: during a surge,
// when two data-plane pods are on it, the newer one (replicas are in the
// order the lab first saw their pods; the old one is retired when it ends).
func (p *Plane) ReplicaAt(index int) *Replica {
	reps := p.Replicas()
	for _, d := range slices.Backward(reps) {
		if d.index == index {
			return d
		}
	}
	return nil
}

// SetReplica makes d replica d.Index() of the run (appended when new).
func (p *Plane) SetReplica(d *Replica) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, o := range p.replicas {
		if o.index == d.index {
			p.replicas[i] = d
			return
		}
	}
	p.replicas = append(p.replicas, d)
}

// DropReplica takes d out of the run's replicas (a hard failure).
func (p *Plane) DropReplica(d *Replica) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.replicas = slices.DeleteFunc(p.replicas, func(o *Replica) bool { return o == d })
}

// addSocks records counting proxies for the run's write count.
func (p *Plane) addSocks(s ...*sockcount.Proxy) {
	p.mu.Lock()
	p.socks = append(p.socks, s...)
	p.mu.Unlock()
}

// Landed is the writes counted at every replica's HAProxy sockets, retired
// replicas' included, and an error when a socket's proxy was bypassed.
func (p *Plane) Landed() (int64, error) {
	p.mu.Lock()
	socks := slices.Clone(p.socks)
	retired := p.retiredWrites
	p.mu.Unlock()
	n, err := sockcount.Landed(socks)
	if err != nil {
		return 0, err
	}
	return retired + n, nil
}

// Sessions reads, for each replica running at the end, how many
// connections its HAProxy's frontends accepted (show stat, FRONTEND rows,
// stot): that the client's route spread the traffic over them. A replica
// replaced during the run counts from its replacement's start.
func (p *Plane) Sessions() []int64 {
	var out []int64
	for _, d := range p.Replicas() {
		n, err := frontendSessions(filepath.Join(d.dir, "admin.sock"))
		if err != nil {
			p.cfg.Logf("%s: sessions of replica %d: %v", p.cfg.Name, d.index, err)
			n = -1
		}
		out = append(out, n)
	}
	return out
}

// frontendSessions sums stot over the FRONTEND rows of `show stat` at the
// admin socket, read through the provider's one reader of it.
func frontendSessions(sock string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := haproxy.ReadStat(ctx, sock)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, r := range rows {
		if r.IsFrontend() {
			sum += r.Sessions
		}
	}
	return sum, nil
}
