package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
)

// agent is the kubelet (and scheduler) stand-in for every lab node: it
// registers Nodes and keeps their heartbeats, binds pending pods, runs each
// pod in its own network namespace (podRuntime) and reports pod status the
// way the kubelet does. Its pods are watched through an informer; every change
// enqueues the pod's key and a worker re-reads the current state
// (level-triggered).
type Agent struct {
	client kubernetes.Interface
	net    *Network
	nodes  []string
	// hostNodes are the data plane's nodes (addHostNodes): the
	// load-balancer hosts, by Node name; their pods use the host network.
	hostNodes map[string]*netlab.Host
	// containers runs the chart's pods (pods_containers.go); nil: the lab
	// runs no chart pods.
	Containers *ContainerEnv
	exe        string // the zerodrop binary controller pods run
	dir        string // controller pods' logs
	// onStop, when set, is called once for a pod about to be stopped
	// (before its preStop hooks), while its metrics still answer.
	OnStop func(*corev1.Pod)
	// hookDone, when set, learns the end of every preStop hook.
	HookDone func(pod *corev1.Pod, failed bool)
	// ControllerForwards, when set, returns more loopback addresses a
	// controller pod reaches in the root namespace (the lab's ARM
	// emulator): each is forwarded from the same address on the pod's
	// loopback, as the API server is.
	ControllerForwards func() []string
	logf               func(string, ...any)

	factory informers.SharedInformerFactory
	Pods    corelisters.PodLister
	nodeLs  corelisters.NodeLister
	queue   workqueue.TypedRateLimitingInterface[string]

	mu        sync.Mutex
	runtimes  map[string]*podRuntime   // by namespace/name
	abandoned []func(*corev1.Pod) bool // pods of runs the lab tore down
	boundTo   map[string]string        // bound pods the informer has not shown bound yet
	stopped   chan struct{}            // closed once every pod process is gone

	bindMu sync.Mutex // one binding decision at a time, like a scheduler

	// down are the nodes failed by failNode: no heartbeats, their pods'
	// processes dead and not started again, until recoverNode.
	down map[string]bool
}

const NodeLeaseNamespace = "kube-node-lease"

func NewAgent(client kubernetes.Interface, net *Network, exe, dir string, logf func(string, ...any)) *Agent {
	a := &Agent{
		client: client, net: net, exe: exe, dir: dir, logf: logf,
		runtimes: map[string]*podRuntime{}, hostNodes: map[string]*netlab.Host{},
		boundTo: map[string]string{}, stopped: make(chan struct{}), down: map[string]bool{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 2*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "lab-agent"}),
	}
	for _, n := range net.Net.Nodes {
		a.nodes = append(a.nodes, NodeName(n.Index))
	}
	return a
}

// start registers the nodes, starts the informers and the workers; they run
// until ctx is done, and then every pod process is killed.
func (a *Agent) Start(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		a.queue.ShutDown()
		a.killAll()
		close(a.stopped)
	}()
	for _, name := range a.nodes {
		if err := a.registerNode(ctx, name); err != nil {
			return err
		}
	}
	go a.heartbeats(ctx)
	a.factory = informers.NewSharedInformerFactory(a.client, 0)
	podInf := a.factory.Core().V1().Pods()
	a.Pods = podInf.Lister()
	a.nodeLs = a.factory.Core().V1().Nodes().Lister()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			a.queue.Add(key)
		}
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, cur any) { enqueue(cur) }, DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	a.factory.Start(ctx.Done())
	for typ, ok := range a.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("agent: %v informer did not sync", typ)
		}
	}
	for range 4 {
		go func() {
			for a.processNext(ctx) {
			}
		}()
	}
	return nil
}

// wait waits (up to 10 s) until the agent stopped after its context ended.
func (a *Agent) Wait() {
	select {
	case <-a.stopped:
	case <-time.After(10 * time.Second):
	}
	if a.factory != nil {
		a.factory.Shutdown()
	}
}

func (a *Agent) processNext(ctx context.Context) bool {
	key, shutdown := a.queue.Get()
	if shutdown {
		return false
	}
	defer a.queue.Done(key)
	if err := a.sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			a.logf("agent: pod %s: %v", key, err)
		}
		a.queue.AddRateLimited(key)
		return true
	}
	a.queue.Forget(key)
	return true
}

// sync brings one pod's process and status in line with the pod object.
func (a *Agent) sync(ctx context.Context, key string) error {
	ns, name, _ := strings.Cut(key, "/")
	pod, err := a.Pods.Pods(ns).Get(name)
	rt := a.runtime(key)
	if apierrors.IsNotFound(err) {
		if rt != nil {
			rt.kill()
			a.forget(key)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if rt != nil && rt.uid != pod.UID {
		rt.kill()
		a.forget(key)
		rt = nil
	}
	if a.isAbandoned(pod) {
		if pod.DeletionTimestamp != nil {
			return a.deleteNow(ctx, pod)
		}
		return nil
	}
	if a.NodeDown(pod.Spec.NodeName) {
		// Its kubelet is gone with the node: nothing is reported or run.
		return nil
	}
	if pod.DeletionTimestamp != nil {
		return a.syncTerminating(ctx, key, pod, rt)
	}
	if pod.Spec.NodeName == "" {
		return a.bind(ctx, pod)
	}
	if !slices.Contains(a.nodes, pod.Spec.NodeName) {
		return nil
	}
	a.mu.Lock()
	delete(a.boundTo, key)
	a.mu.Unlock()
	if rt == nil {
		if rt, err = a.startPod(ctx, key, pod); err != nil {
			return err
		}
	}
	return a.syncStatus(ctx, pod, rt)
}

// syncTerminating stops a deleted pod's containers (OnStop first, once) and
// deletes the object once they have finished, as the kubelet does.
func (a *Agent) syncTerminating(ctx context.Context, key string, pod *corev1.Pod, rt *podRuntime) error {
	if rt == nil {
		return a.deleteNow(ctx, pod)
	}
	rt.mu.Lock()
	first := !rt.terminating
	rt.mu.Unlock()
	if first && a.OnStop != nil {
		a.OnStop(pod)
	}
	rt.terminate(deletionGrace(pod))
	if _, finished, _ := rt.status(); !finished.IsZero() {
		if err := a.syncStatus(ctx, pod, rt); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if err := a.deleteNow(ctx, pod); err != nil {
			return err
		}
		a.forget(key)
		return nil
	}
	return a.syncStatus(ctx, pod, rt)
}

// startPod starts a pod bound to one of the agent's nodes: in a namespace
// of its own on a lab node, or in a data-plane node's namespace.
func (a *Agent) startPod(ctx context.Context, key string, pod *corev1.Pod) (*podRuntime, error) {
	var netPod *netlab.Pod
	var env podEnv
	if h := a.hostNodes[pod.Spec.NodeName]; h != nil {
		// A data-plane node's pod uses the node's namespace.
		if !pod.Spec.HostNetwork {
			return nil, fmt.Errorf("node %s runs host-network pods only", pod.Spec.NodeName)
		}
		netPod = &netlab.Pod{Netns: h.Netns, IP: h.IP}
		env = a.podEnv(h.DialContext, h.IP.String())
		env.host = true
	} else {
		if pod.Spec.HostNetwork {
			return nil, fmt.Errorf("the lab runs host-network pods on data-plane nodes only")
		}
		node := a.net.nodeFor(pod.Spec.NodeName)
		// A pod's namespace, with the next address of its node's pod
		// CIDR (never reused within a lab run).
		var err error
		if netPod, err = a.net.Net.AddPod(ctx, node); err != nil {
			return nil, err
		}
		env = a.podEnv(node.DialContext, node.IP.String())
	}
	rt, err := startPodRuntime(pod, netPod, env, func() { a.queue.Add(key) }, a.logf)
	if err != nil {
		if env.host {
			return nil, err
		}
		return nil, errors.Join(err, netPod.Close())
	}
	a.mu.Lock()
	a.runtimes[key] = rt
	a.mu.Unlock()
	a.logf("pod %s started on %s as %s in %s", key, rt.node, rt.ip, netPod.Name)
	return rt, nil
}

// podEnv is what a pod on a node needs: dial connects from the node's
// namespace, whose address is hostIP.
func (a *Agent) podEnv(dial func(ctx context.Context, network, addr string) (net.Conn, error), hostIP string) podEnv {
	return podEnv{dial: dial, hostIP: hostIP, lab: a.net.Net, exe: a.exe, apiserver: a.net.apiserver, logDir: a.dir,
		hookDone: a.HookDone, containers: a.Containers, forwards: a.ControllerForwards}
}

func deletionGrace(pod *corev1.Pod) time.Duration {
	if s := pod.DeletionGracePeriodSeconds; s != nil {
		return time.Duration(*s) * time.Second
	}
	if s := pod.Spec.TerminationGracePeriodSeconds; s != nil {
		return time.Duration(*s) * time.Second
	}
	return 30 * time.Second
}

func (a *Agent) forget(key string) {
	a.mu.Lock()
	delete(a.runtimes, key)
	a.mu.Unlock()
}

// deleteNow is the kubelet's final delete once the containers are gone.
func (a *Agent) deleteNow(ctx context.Context, pod *corev1.Pod) error {
	err := a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// abandon ends the pods that match at once (the lab's teardown of a run):
// their processes are killed, pods being deleted are deleted for good
// without running their hooks, and matching pods are never started again.
func (a *Agent) Abandon(match func(*corev1.Pod) bool) {
	a.mu.Lock()
	a.abandoned = append(a.abandoned, match)
	var kill []*podRuntime
	for key, rt := range a.runtimes {
		if match(rt.pod) {
			kill = append(kill, rt)
			delete(a.runtimes, key)
		}
	}
	a.mu.Unlock()
	for _, rt := range kill {
		rt.kill()
	}
	if pods, err := a.Pods.List(labels.Everything()); err == nil {
		for _, p := range pods {
			if match(p) {
				a.queue.Add(p.Namespace + "/" + p.Name)
			}
		}
	}
}

func (a *Agent) isAbandoned(pod *corev1.Pod) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.ContainsFunc(a.abandoned, func(match func(*corev1.Pod) bool) bool { return match(pod) })
}

// counts reports a namespace's pod processes: running and terminating.
func (a *Agent) Counts(ns string) (running, terminating int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, rt := range a.runtimes {
		if !strings.HasPrefix(key, ns+"/") {
			continue
		}
		rt.mu.Lock()
		if rt.terminating {
			terminating++
		} else {
			running++
		}
		rt.mu.Unlock()
	}
	return running, terminating
}

// signal sends sig to the process of the controller pod key (namespace/name),
// as the kernel's OOM killer or a crash would end it: the pod then finishes
// as its process exits, and its ReplicaSet replaces it (the lab's kubelet
// does not restart containers in place).
func (a *Agent) Signal(key string, sig syscall.Signal) error {
	rt := a.runtime(key)
	if rt == nil || rt.proc == nil {
		return fmt.Errorf("no process runs for pod %s", key)
	}
	rt.logf("pod %s: sent %s", key, sig)
	rt.proc.Signal(sig)
	return nil
}

// signalContainer sends sig to the process group of container name of the
// chart pod key; the lab's kubelet starts it again as the kubelet would.
func (a *Agent) SignalContainer(key, name string, sig syscall.Signal) error {
	rt := a.runtime(key)
	if rt == nil {
		return fmt.Errorf("no pod %s runs", key)
	}
	rt.logf("pod %s container %s: sent %s", key, name, sig)
	return rt.signalContainer(name, sig)
}

// finished reports whether the process of the pod key has ended (or the
// agent no longer runs the pod).
func (a *Agent) Finished(key string) bool {
	rt := a.runtime(key)
	if rt == nil {
		return true
	}
	select {
	case <-rt.done:
		return true
	default:
		return false
	}
}

// WebSocket is one WebSocket a web pod of the agent holds: the pod's node
// and the address the connection came from.
type WebSocket struct {
	PodNode string
	Peer    netip.Addr
}

// WebSockets lists the WebSockets the web pods of namespace ns hold open.
func (a *Agent) WebSockets(ns string) []WebSocket {
	a.mu.Lock()
	var servers []*podRuntime
	for key, rt := range a.runtimes {
		if strings.HasPrefix(key, ns+"/") && rt.server != nil {
			servers = append(servers, rt)
		}
	}
	a.mu.Unlock()
	var out []WebSocket
	for _, rt := range servers {
		for _, p := range rt.server.WebSocketPeers() {
			ap, err := netip.ParseAddrPort(p)
			if err != nil {
				continue
			}
			out = append(out, WebSocket{PodNode: rt.node, Peer: ap.Addr()})
		}
	}
	return out
}

// runtime is the runtime of the pod key, nil when the agent runs none.
func (a *Agent) runtime(key string) *podRuntime {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runtimes[key]
}

func (a *Agent) killAll() {
	a.mu.Lock()
	all := a.runtimes
	a.runtimes = map[string]*podRuntime{}
	a.mu.Unlock()
	for _, rt := range all {
		rt.kill()
	}
}
