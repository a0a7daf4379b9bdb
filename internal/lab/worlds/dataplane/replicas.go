package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/lab/world"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// The lab's own arrangement of a data plane of replicas (--data-plane-replicas
// N, zerodrop mode, not --from-chart), the one the chart's provider=haproxy
// installs, made by the lab (docs/lab.md, "An HAProxy data plane of
// replicas", has its parts): replica i is an HAProxy and its own
// `zerodrop controller --role=data-plane` process on load-balancer host
// lbs[i], and a Pod object, bound to no lab node, by which the control role
// (ControlArgs) finds it.
const (
	// labelDataPlane marks a run's data-plane replica Pods (value: run id).
	labelDataPlane = "lab.zerodrop.dev/data-plane"
	// StatePort is the replicas' state endpoint (the chart's default).
	StatePort = 9092
)

// labDataPlaneServiceAccount is the ServiceAccount of the replicas of the
// lab's own arrangement, bound to cluster-admin: the lab runs them with
// the chart's flags, not its RBAC (--from-chart runs those).
const labDataPlaneServiceAccount = "lab-data-plane"

// dataPlaneImage names the data-plane pods' image (the chart's).
const dataPlaneImage = "lab/zerodrop-dataplane:dev"

// account makes labDataPlaneServiceAccount, if missing.
func (p *Plane) account(ctx context.Context) error {
	cs, ns := p.cfg.Client, world.ControllerNamespace
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: labDataPlaneServiceAccount}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("data-plane ServiceAccount: %w", err)
	}
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: labDataPlaneServiceAccount},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: labDataPlaneServiceAccount}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("data-plane ServiceAccount binding: %w", err)
	}
	return nil
}

// Start starts every replica and routes the client to them all.
func (p *Plane) Start(ctx context.Context) error {
	if err := p.account(ctx); err != nil {
		return err
	}
	if err := os.MkdirAll(p.cfg.Dir, 0o700); err != nil {
		return err
	}
	var members []int
	for i := 0; i < p.cfg.Replicas; i++ {
		d := &Replica{index: i, gen: 1, runID: p.cfg.RunID, host: p.cfg.Net.LBs[i]}
		err := p.StartReplica(ctx, d)
		// Published also when it failed: the teardown stops what started.
		p.SetReplica(d)
		if err != nil {
			return fmt.Errorf("data-plane replica %d: %w", i, err)
		}
		members = append(members, i)
	}
	return p.cfg.Net.RouteTo(ctx, true, members...)
}

// StartReplica starts a replica's HAProxy (from an empty state directory,
// as a new pod's emptyDir) as the chart's haproxy container runs it, its
// zerodrop process, and its Pod object.
func (p *Plane) StartReplica(ctx context.Context, d *Replica) error {
	d.dir = filepath.Join(p.cfg.Dir, fmt.Sprintf("replica-%d-%d", d.index, d.gen))
	if err := p.startHAProxy(ctx, d); err != nil {
		return err
	}
	// The pod first: the process authenticates as it (a token bound to
	// it) and its state endpoint's certificate names the pod's UID.
	if err := p.replicaPod(ctx, d); err != nil {
		return err
	}
	return p.StartProcess(ctx, d)
}

// replicaArgs are the replica's zerodrop process's: the chart's data-plane
// container's flags, with the run's class and the lab's kubeconfig.
func (p *Plane) replicaArgs(d *Replica) []string {
	return []string{
		"controller",
		"--kubeconfig=" + d.dir + ".kubeconfig",
		"--load-balancer-class=" + p.cfg.Class,
		"--role=data-plane",
		"--pod-name=" + d.Pod(),
		"--pod-namespace=" + world.ControllerNamespace,
		"--pod-uid=" + string(d.labPodUID),
		"--haproxy-socket=" + filepath.Join(d.dir, "admin.sock"),
		"--haproxy-master-socket=" + filepath.Join(d.dir, "master.sock"),
		"--haproxy-config=" + filepath.Join(d.dir, "haproxy.cfg"),
		// The haproxy container's validator checks each configuration
		// (startHAProxy), as in the chart.
		"--haproxy-validate-socket=" + filepath.Join(d.dir, haproxy.ValidationSocketName),
		fmt.Sprintf("--state-bind-address=:%d", StatePort),
		fmt.Sprintf("--metrics-bind-address=:%d", world.MetricsPort),
		fmt.Sprintf("--health-probe-bind-address=:%d", world.ProbesPort),
	}
}

// StartProcess starts the replica's zerodrop process in its host's
// namespace and waits until it is ready (its HAProxy answers).
func (p *Plane) StartProcess(ctx context.Context, d *Replica) error {
	d.mu.Lock()
	d.runs++
	n := d.runs
	d.mu.Unlock()
	logPath := filepath.Join(p.cfg.LogDir, fmt.Sprintf("data-plane-%d-%d-%d-%d.log", p.cfg.RunID, d.index, d.gen, n))
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	// env(1) sets ChildEnv (for a test binary's TestMain) and execs: the
	// process keeps its PID, and its signals are the replica's.
	args := append([]string{cluster.ChildEnv + "=controller", p.cfg.Executable}, p.replicaArgs(d)...)
	proc, err := p.cfg.Net.Net.Start(d.host.Netns, f, f, "env", args...)
	f.Close()
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.proc = proc
	d.mu.Unlock()
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: p.cfg.Net.Admin.DialContext}}
	url := fmt.Sprintf("http://%s:%d/readyz", d.host.IP, world.ProbesPort)
	return traffic.WaitFor(ctx, 60*time.Second, fmt.Sprintf("data-plane replica %d's zerodrop process ready", d.index), func() (bool, string) {
		if proc.Exited() {
			return false, "exited (log " + logPath + ")"
		}
		if err := traffic.Get(client, url); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// replicaPod is the replica's Pod object, as its DaemonSet pod would be
// reported: running, with its host's address (host network).
func (p *Plane) replicaPod(ctx context.Context, d *Replica) error {
	pods := p.cfg.Client.CoreV1().Pods(world.ControllerNamespace)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: d.Pod(), Namespace: world.ControllerNamespace,
			Labels: map[string]string{labelDataPlane: strconv.Itoa(p.cfg.RunID)}},
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
	token, err := p.cfg.Token(ctx, created)
	if err != nil {
		return fmt.Errorf("data-plane pod %s: token: %w", pod.Name, err)
	}
	kc := rest.AnonymousClientConfig(p.cfg.REST)
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

// StopReplica ends a replica: its zerodrop process, its HAProxy, its Pod.
func (p *Plane) StopReplica(ctx context.Context, d *Replica) error {
	var errs []error
	if proc, _ := d.ProcessRun(); proc != nil {
		_ = proc.Stop()
	}
	errs = append(errs, p.stopHAProxy(d))
	err := p.cfg.Client.CoreV1().Pods(world.ControllerNamespace).Delete(ctx, d.Pod(), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Stop ends every replica of the lab's arrangement (the chart's are
// retired and uninstalled by then: RetireAll), routes the client to the
// first load balancer only, as runs without a data plane of replicas
// expect, and closes the counting proxies in front of every replica's
// sockets.
func (p *Plane) Stop(ctx context.Context) {
	if p.cfg.DaemonSet == "" {
		for _, d := range p.Replicas() {
			if err := p.StopReplica(ctx, d); err != nil {
				p.cfg.Logf("%s: stop data-plane replica %d: %v", p.cfg.Name, d.index, err)
			}
		}
	}
	if p.cfg.FRR != nil {
		p.stopRouteRecorder()
		p.stopFRRRoutes(ctx)
	}
	if err := p.cfg.Net.RouteTo(ctx, true, 0); err != nil {
		p.cfg.Logf("%s: route to the first load balancer: %v", p.cfg.Name, err)
	}
	p.mu.Lock()
	socks := slices.Clone(p.socks)
	p.mu.Unlock()
	for _, s := range socks {
		if err := s.Close(); err != nil {
			p.cfg.Logf("%s: %v", p.cfg.Name, err)
		}
	}
}

// ControlArgs are the control role's flags for the run's replicas.
func (p *Plane) ControlArgs() []string {
	return []string{
		"--role=control",
		"--data-plane-namespace=" + world.ControllerNamespace,
		"--data-plane-selector=" + labelDataPlane + "=" + strconv.Itoa(p.cfg.RunID),
		fmt.Sprintf("--data-plane-state-port=%d", StatePort),
	}
}
