package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/netlab"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/sockcount"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// An HAProxy data plane of replicas (--data-plane-replicas N, zerodrop
// mode): the arrangement the chart's provider=haproxy installs, made by the
// lab. Replica i runs on load-balancer host lbs[i] (its own network
// namespace, every frontend address local, as on a data-plane node): an
// HAProxy the lab starts there (standing for the pod's haproxy container,
// with the lab's counting proxies at its sockets) and the replica's own
// `zerodrop controller --role=data-plane` process attached to it, the only
// writer of that HAProxy. A Pod object in zerodrop-system, bound to no lab
// node (the lab's kubelet leaves it alone) and given the host's address as
// its IP by the lab, is how the control role finds the replica. The
// controller pods run with --role=control. The client reaches the replicas
// through a resilient nexthop group hashed on the 5-tuple (network.routeTo).
const (
	// labelDataPlane marks a run's data-plane replica Pods (value: run id).
	labelDataPlane = "lab.zerodrop.dev/data-plane"
	// statePort is the replicas' state endpoint (the chart's default).
	statePort = 9092
)

// dpReplica is one data-plane replica of a run.
type dpReplica struct {
	index int
	gen   int // 1 for the first pod of this replica, +1 per replacement
	host  *netlab.Host
	dir   string
	prov  *haproxy.Provider // the lab's view of the replica's HAProxy
	socks []*sockcount.Proxy
	// podName and podUID: a replica installed from the chart
	// (dataplane_chart.go) is its DaemonSet pod.
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
	runs int             // processes started, for scrape keys and logs
}

func (d *dpReplica) pod(runID int) string {
	if d.podName != "" {
		return d.podName
	}
	return fmt.Sprintf("data-plane-%d-%d-%d", runID, d.index, d.gen)
}

func (d *dpReplica) process() *netlab.Process {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.proc
}

// landed is the writes counted at this replica's HAProxy sockets.
func (d *dpReplica) landed() int64 {
	var n int64
	for _, p := range d.socks {
		n += int64(p.Counts().Writes)
	}
	return n
}

// dataPlaneEnabled: the run has a data plane of replicas.
func (r *run) dataPlaneEnabled() bool {
	return r.mode == report.ModeZerodrop && r.lab.opts.DataPlaneReplicas >= 2
}

// replicas are the run's data-plane replicas now.
func (r *run) replicas() []*dpReplica {
	r.dpMu.Lock()
	defer r.dpMu.Unlock()
	return slices.Clone(r.dataPlane)
}

// setReplica makes d replica d.index of the run (appended when new).
func (r *run) setReplica(d *dpReplica) {
	r.dpMu.Lock()
	defer r.dpMu.Unlock()
	for i, o := range r.dataPlane {
		if o.index == d.index {
			r.dataPlane[i] = d
			return
		}
	}
	r.dataPlane = append(r.dataPlane, d)
}

// dropReplica takes d out of the run's replicas (a hard failure).
func (r *run) dropReplica(d *dpReplica) {
	r.dpMu.Lock()
	defer r.dpMu.Unlock()
	r.dataPlane = slices.DeleteFunc(r.dataPlane, func(o *dpReplica) bool { return o == d })
}

// labDataPlaneServiceAccount is the ServiceAccount of the replicas of the
// lab's own arrangement, bound to cluster-admin: the lab runs them with
// the chart's flags, not its RBAC (--from-chart runs those).
const labDataPlaneServiceAccount = "lab-data-plane"

// dataPlaneAccount makes labDataPlaneServiceAccount, if missing.
func (r *run) dataPlaneAccount(ctx context.Context) error {
	cs := r.lab.cp.Client
	_, err := cs.CoreV1().ServiceAccounts(ctrlNamespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Namespace: ctrlNamespace, Name: labDataPlaneServiceAccount}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("data-plane ServiceAccount: %w", err)
	}
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: labDataPlaneServiceAccount},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ctrlNamespace, Name: labDataPlaneServiceAccount}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("data-plane ServiceAccount binding: %w", err)
	}
	return nil
}

// startDataPlane starts every replica and routes the client to them all.
func (r *run) startDataPlane(ctx context.Context) error {
	if err := r.dataPlaneAccount(ctx); err != nil {
		return err
	}
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return err
	}
	var members []int
	for i := 0; i < r.lab.opts.DataPlaneReplicas; i++ {
		d := &dpReplica{index: i, gen: 1, host: r.lab.net.LBs[i]}
		err := r.startReplica(ctx, d)
		// Published also when it failed: the teardown stops what started.
		r.setReplica(d)
		if err != nil {
			return fmt.Errorf("data-plane replica %d: %w", i, err)
		}
		members = append(members, i)
	}
	r.prov = r.replicas()[0].prov
	return r.lab.net.RouteTo(ctx, true, members...)
}

// startReplica starts a replica's HAProxy (from an empty state directory,
// as a new pod's emptyDir), its zerodrop process, and its Pod object.
func (r *run) startReplica(ctx context.Context, d *dpReplica) error {
	d.dir = filepath.Join(r.dir, fmt.Sprintf("replica-%d-%d", d.index, d.gen))
	wrapper := d.dir + ".sh"
	if err := cluster.WriteHAProxyWrapper(wrapper, d.host.Name); err != nil {
		return err
	}
	prov, socks, err := cluster.StartHAProxy(ctx, d.dir, wrapper)
	d.socks = socks
	r.addSocks(socks...)
	if err != nil {
		return err
	}
	d.prov = prov
	// The pod first: the process authenticates as it (a token bound to
	// it) and its state endpoint's certificate names the pod's UID.
	if err := r.replicaPod(ctx, d); err != nil {
		return err
	}
	return r.startReplicaProcess(ctx, d)
}

// replicaArgs are the replica's zerodrop process's: the chart's data-plane
// container's flags, with the run's class and the lab's kubeconfig.
func (r *run) replicaArgs(d *dpReplica) []string {
	return []string{
		"controller",
		"--kubeconfig=" + d.dir + ".kubeconfig",
		"--load-balancer-class=" + r.class,
		"--role=data-plane",
		"--pod-name=" + d.pod(r.id),
		"--pod-namespace=" + ctrlNamespace,
		"--pod-uid=" + string(d.labPodUID),
		"--haproxy-socket=" + filepath.Join(d.dir, "admin.sock"),
		"--haproxy-master-socket=" + filepath.Join(d.dir, "master.sock"),
		"--haproxy-config=" + filepath.Join(d.dir, "haproxy.cfg"),
		"--haproxy-binary=" + d.dir + ".sh",
		fmt.Sprintf("--state-bind-address=:%d", statePort),
		fmt.Sprintf("--metrics-bind-address=:%d", metricsPort),
		fmt.Sprintf("--health-probe-bind-address=:%d", probesPort),
	}
}

// startReplicaProcess starts the replica's zerodrop process in its host's
// namespace and waits until it is ready (its HAProxy answers).
func (r *run) startReplicaProcess(ctx context.Context, d *dpReplica) error {
	d.mu.Lock()
	d.runs++
	n := d.runs
	d.mu.Unlock()
	logPath := filepath.Join(r.lab.dir, fmt.Sprintf("data-plane-%d-%d-%d-%d.log", r.id, d.index, d.gen, n))
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	// env(1) sets ChildEnv (for a test binary's TestMain) and execs: the
	// process keeps its PID, and its signals are the replica's.
	args := append([]string{cluster.ChildEnv + "=controller", r.lab.opts.Executable}, r.replicaArgs(d)...)
	p, err := r.lab.net.Net.Start(d.host.Netns, f, f, "env", args...)
	f.Close()
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.proc = p
	d.mu.Unlock()
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: r.lab.net.Admin.DialContext}}
	url := fmt.Sprintf("http://%s:%d/readyz", d.host.IP, probesPort)
	return waitFor(ctx, 60*time.Second, fmt.Sprintf("data-plane replica %d's zerodrop process ready", d.index), func() (bool, string) {
		select {
		case <-p.Done():
			return false, "exited (log " + logPath + ")"
		default:
		}
		if err := traffic.Get(client, url); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// replicaPod is the replica's Pod object, as its DaemonSet pod would be
// reported: running, with its host's address (host network).
func (r *run) replicaPod(ctx context.Context, d *dpReplica) error {
	pods := r.lab.cp.Client.CoreV1().Pods(ctrlNamespace)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: d.pod(r.id), Namespace: ctrlNamespace,
			Labels: map[string]string{labelDataPlane: strconv.Itoa(r.id)}},
		Spec: corev1.PodSpec{
			// No lab node: the lab's kubelet runs nothing for it.
			NodeName:           fmt.Sprintf("lab-lb-%d", d.index+1),
			HostNetwork:        true,
			ServiceAccountName: labDataPlaneServiceAccount,
			Containers: []corev1.Container{{Name: "haproxy", Image: dataPlaneImage},
				{Name: "controller", Image: dataPlaneImage}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("data-plane pod %s: %w", pod.Name, err)
	}
	d.labPodUID = created.UID
	// The replica's process authenticates as its pod, with a token bound
	// to it, as the kubelet's projected token is.
	token, err := r.lab.serviceAccountToken(ctx, created)
	if err != nil {
		return fmt.Errorf("data-plane pod %s: token: %w", pod.Name, err)
	}
	kc := rest.AnonymousClientConfig(r.lab.cp.Config)
	kc.BearerToken = token
	if _, err := cluster.WriteKubeconfig(kc, "https://"+cluster.APIServerInNetns, d.dir+".kubeconfig"); err != nil {
		return err
	}
	ip := d.host.IP.String()
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		HostIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if _, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("data-plane pod %s status: %w", pod.Name, err)
	}
	return nil
}

// dataPlaneImage names the data-plane pods' image (the chart's).
const dataPlaneImage = "lab/zerodrop-dataplane:dev"

// stopReplica ends a replica: its zerodrop process, its HAProxy, its Pod.
func (r *run) stopReplica(ctx context.Context, d *dpReplica) error {
	var errs []error
	if p := d.process(); p != nil {
		_ = p.Stop()
	}
	if d.prov != nil {
		errs = append(errs, r.stopHAProxy(d.prov, d.dir))
	}
	err := r.lab.cp.Client.CoreV1().Pods(ctrlNamespace).Delete(ctx, d.pod(r.id), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// stopDataPlane ends every replica and routes the client to the first load
// balancer only, as runs without a data plane of replicas expect.
func (r *run) stopDataPlane() {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	reps := r.replicas()
	if r.fromChart() {
		// The counting proxies go first: uninstalling removes the pods'
		// directories, where they would put HAProxy's sockets back.
		for _, d := range reps {
			r.retireReplica(d)
		}
		if err := r.uninstallChart(ctx, 75*time.Second); err != nil {
			r.lab.logf("%s: uninstall the chart: %v", r.name(), err)
		}
		reps = nil
	}
	for _, d := range reps {
		if err := r.stopReplica(ctx, d); err != nil {
			r.lab.logf("%s: stop data-plane replica %d: %v", r.name(), d.index, err)
		}
	}
	if r.dataPlaneEnabled() {
		if err := r.lab.net.RouteTo(ctx, true, 0); err != nil {
			r.lab.logf("%s: route to the first load balancer: %v", r.name(), err)
		}
	}
}

// dataPlaneControlArgs are the control role's flags for the run's replicas.
func (r *run) dataPlaneControlArgs() []string {
	return []string{
		"--role=control",
		"--data-plane-namespace=" + ctrlNamespace,
		"--data-plane-selector=" + labelDataPlane + "=" + strconv.Itoa(r.id),
		fmt.Sprintf("--data-plane-state-port=%d", statePort),
	}
}

// scrapeDataPlane reads every running replica process's metrics (writes
// and conflicts it reports itself), keyed by process.
func (cs *controllers) scrapeDataPlane() {
	for _, d := range cs.run.replicas() {
		d.mu.Lock()
		p, n := d.proc, d.runs
		d.mu.Unlock()
		if p == nil {
			continue
		}
		select {
		case <-p.Done():
			continue
		default:
		}
		name := fmt.Sprintf("%s/%d", d.pod(cs.run.id), n)
		cs.scrapeAt(types.UID("process:"+name), name, d.host.IP.String())
	}
}

// maxDataPlaneReplicas bounds --data-plane-replicas.
const MaxDataPlaneReplicas = 4

// dataPlaneRuns says why scenario cannot run with n data-plane replicas
// (nil: it can).
func DataPlaneRuns(scenario string, n int) error {
	sc, _ := ScenarioNamed(scenario)
	switch {
	case n == 0 && sc.dataPlane:
		return fmt.Errorf("scenario %s needs --data-plane-replicas 2 or more", scenario)
	case n > 0 && !slices.Contains(dataPlaneScenarios, scenario):
		return fmt.Errorf("scenario %s does not run with --data-plane-replicas: it counts the writes of the one HAProxy the leader writes", scenario)
	}
	return nil
}
