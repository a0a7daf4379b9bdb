package cluster

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
)

// The chart's pods (zerodrop's images) are run as a container runtime and
// the kubelet would run them, as far as the lab goes: every container is a
// process in the pod's network namespace (the node's for a host-network
// pod) and a mount namespace of its own (mountScript: a fresh /run, the
// "image" at /run/image, the emptyDir volumes and the ServiceAccount
// token), with the container's environment (containerEnvVars), started
// again after the kubelet's back-off when it exits (supervise). What is
// done and what is not: docs/lab.md, "Installed from the chart".

// containerEnv is what running the chart's containers needs from the lab.
type ContainerEnv struct {
	ImageDir string // mounted at /run/image: zerodrop, and the haproxy wrapper
	Dir      string // the pods' directories (volumes, tokens)
	CAFile   string // the API server's CA certificate
	// token returns a ServiceAccount token for the pod.
	Token func(ctx context.Context, pod *corev1.Pod) (string, error)
	// beforeStart, when set, runs before each start of a container, with a
	// function that maps a path in the container to the host's.
	BeforeStart func(ctx context.Context, pod *corev1.Pod, c *corev1.Container, hostPath func(string) (string, bool)) error
	// afterStop, when set, runs once the pod's containers are gone, before
	// its directory is removed.
	AfterStop func(pod *corev1.Pod)
}

// chartImages are the repositories of zerodrop's images (any registry and
// tag; not the lab's own controllerImage): their /zerodrop is the
// production build.
var chartImages = []string{"zerodrop", "zerodrop-dataplane"}

// chartPod reports whether every container of pod runs one of zerodrop's
// images (and none is the lab's own controller image).
func chartPod(pod *corev1.Pod) bool {
	return len(pod.Spec.Containers) > 0 && !slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return !chartImage(c.Image) })
}

func chartImage(image string) bool {
	if image == ControllerImage {
		// The lab's own controller pods (the lab's build).
		return false
	}
	repo, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	return slices.Contains(chartImages, path.Base(repo))
}

// containerProc is one container of a chart pod.
type containerProc struct {
	c        *corev1.Container
	proc     *netlab.Process
	restarts int32
	started  time.Time
}

// podDir is the pod's own directory (its volumes and token). Its names are
// short: HAProxy's sockets are in a volume, and a unix socket's path has at
// most 107 bytes.
func (r *podRuntime) podDir() string {
	return filepath.Join(r.env.containers.Dir, string(r.uid)[:min(8, len(r.uid))])
}

// startContainers prepares the pod's volumes and token and starts its
// containers in order.
func (r *podRuntime) startContainers(ctx context.Context) error {
	ce := r.env.containers
	for _, v := range r.pod.Spec.Volumes {
		if serviceAccountVolume(&v) {
			continue // the token directory below
		}
		if v.EmptyDir == nil {
			return fmt.Errorf("volume %s: the lab runs emptyDir volumes only", v.Name)
		}
		if err := os.MkdirAll(filepath.Join(r.podDir(), "v", v.Name), 0o755); err != nil {
			return err
		}
	}
	token, err := ce.Token(ctx, r.pod)
	if err != nil {
		return fmt.Errorf("service account token: %w", err)
	}
	ca, err := os.ReadFile(ce.CAFile)
	if err != nil {
		return err
	}
	sa := filepath.Join(r.podDir(), "sa")
	if err := os.MkdirAll(sa, 0o755); err != nil {
		return err
	}
	for name, data := range map[string][]byte{"token": []byte(token), "ca.crt": ca, "namespace": []byte(r.pod.Namespace)} {
		if err := os.WriteFile(filepath.Join(sa, name), data, 0o644); err != nil {
			return err
		}
	}
	// A host-network pod shares its node's forwarder (network.go).
	if !r.env.host {
		stop, err := r.env.lab.Forward(r.netPod.Netns, APIServerInNetns, r.env.apiserver)
		if err != nil {
			return err
		}
		r.stopFwd = stop
	}
	for i := range r.pod.Spec.Containers {
		cp := &containerProc{c: &r.pod.Spec.Containers[i]}
		if err := r.startContainer(ctx, cp); err != nil {
			return fmt.Errorf("container %s: %w", cp.c.Name, err)
		}
		r.mu.Lock()
		r.containers = append(r.containers, cp)
		r.mu.Unlock()
	}
	return nil
}

// hostPath maps a path in container c to the host's, through c's volume
// mounts.
func (r *podRuntime) hostPath(c *corev1.Container, p string) (string, bool) {
	best := ""
	var dir string
	for _, m := range c.VolumeMounts {
		mp := filepath.Clean(m.MountPath)
		if (p == mp || strings.HasPrefix(p, mp+"/")) && len(mp) > len(best) {
			best, dir = mp, filepath.Join(r.podDir(), "v", m.Name, m.SubPath)
		}
	}
	if best == "" {
		return "", false
	}
	return filepath.Join(dir, strings.TrimPrefix(p, best)), true
}

// startContainer starts (or starts again) one container's process.
func (r *podRuntime) startContainer(ctx context.Context, cp *containerProc) error {
	c := cp.c
	if len(c.Command) > 1 || (len(c.Command) == 1 && c.Command[0] != "/zerodrop") {
		return fmt.Errorf("command %q: the lab runs the images' /zerodrop only", c.Command)
	}
	script, err := mountScript(r, c)
	if err != nil {
		return err
	}
	if hook := r.env.containers.BeforeStart; hook != nil {
		if err := hook(ctx, r.pod, c, func(p string) (string, bool) { return r.hostPath(c, p) }); err != nil {
			return err
		}
	}
	logFile, err := os.OpenFile(filepath.Join(r.env.logDir, r.pod.Namespace+"_"+r.pod.Name+"_"+c.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	env := containerEnvVars(r.pod, c, r.ip.String(), r.env.hostIP)
	args := []string{"-c", script, "sh", "env", "-i"}
	args = append(args, env...)
	args = append(args, "/run/image/zerodrop")
	args = append(args, expandArgs(c.Args, env)...)
	p, err := r.env.lab.Start(r.netPod.Netns, logFile, logFile, "sh", args...)
	if err != nil {
		return err
	}
	r.mu.Lock()
	cp.proc, cp.started = p, time.Now()
	r.mu.Unlock()
	go r.supervise(cp, p)
	return nil
}

// supervise starts the container again when its process exits while the
// pod runs, after the kubelet's back-off.
func (r *podRuntime) supervise(cp *containerProc, p *netlab.Process) {
	<-p.Done()
	code := p.ExitCode()
	r.mu.Lock()
	stopping := r.terminating || !r.finishedAt.IsZero() || r.crashed
	cp.restarts++
	n := cp.restarts
	r.mu.Unlock()
	if stopping {
		return
	}
	r.setReady(cp.c.Name, false, "")
	backoff := min(10*time.Second<<(n-1), 5*time.Minute)
	r.logf("pod %s container %s exited (%d); started again in %s", r.key, cp.c.Name, code, backoff)
	r.notify()
	time.Sleep(backoff)
	r.mu.Lock()
	stopping = r.terminating || !r.finishedAt.IsZero() || r.crashed
	r.mu.Unlock()
	if stopping {
		return
	}
	if err := r.startContainer(context.Background(), cp); err != nil {
		r.logf("pod %s container %s: start again: %v", r.key, cp.c.Name, err)
	}
}

// running reports whether container name's process runs.
func (r *podRuntime) running(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cp := range r.containers {
		if cp.c.Name == name {
			return !cp.proc.Exited()
		}
	}
	return r.finishedAt.IsZero()
}

// restartCount is container name's restarts.
func (r *podRuntime) restartCount(name string) int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cp := range r.containers {
		if cp.c.Name == name {
			return cp.restarts
		}
	}
	return 0
}

// stopContainers sends each container's process SIGTERM (the process only,
// as a runtime signals the container's first process), waits up to grace,
// then kills each container's process group, and reports the first
// container's exit code.
func (r *podRuntime) stopContainers(grace time.Duration) int32 {
	r.mu.Lock()
	list := slices.Clone(r.containers)
	r.mu.Unlock()
	deadline := time.Now().Add(grace)
	for _, cp := range list {
		if grace > 0 {
			cp.proc.SignalLeader(syscall.SIGTERM)
		}
	}
	for _, cp := range list {
		select {
		case <-cp.proc.Done():
		case <-time.After(time.Until(deadline)):
		}
		cp.proc.Signal(syscall.SIGKILL)
		_ = cp.proc.Stop()
	}
	if len(list) == 0 {
		return 0
	}
	return list[0].proc.ExitCode()
}

// crash kills every container's process group and starts none again (its
// node failed: the kubelet is gone too), until restartContainers.
func (r *podRuntime) crash() {
	r.mu.Lock()
	r.crashed = true
	list := slices.Clone(r.containers)
	for _, cp := range list {
		// The probes start over when the containers do (a container
		// without one is ready while it runs: status).
		if cp.c.ReadinessProbe != nil {
			r.ready[cp.c.Name] = false
		}
	}
	r.mu.Unlock()
	for _, cp := range list {
		cp.proc.Signal(syscall.SIGKILL)
		<-cp.proc.Done()
	}
}

// restartContainers starts every container again, in order, after crash
// (the node is back and its kubelet starts the pod's containers again; the
// pod's volumes are as they were).
func (r *podRuntime) restartContainers(ctx context.Context) error {
	r.mu.Lock()
	r.crashed = false
	list := slices.Clone(r.containers)
	r.mu.Unlock()
	for _, cp := range list {
		if err := r.startContainer(ctx, cp); err != nil {
			return fmt.Errorf("container %s: %w", cp.c.Name, err)
		}
	}
	return nil
}

// signalContainer sends sig to container name's process group.
func (r *podRuntime) signalContainer(name string, sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cp := range r.containers {
		if cp.c.Name == name {
			cp.proc.Signal(sig)
			return nil
		}
	}
	return fmt.Errorf("pod %s has no container %s", r.key, name)
}

// mountScript is the shell script that sets up container c's mounts in the
// mount namespace `ip netns exec` made for it and execs its arguments.
func mountScript(r *podRuntime, c *corev1.Container) (string, error) {
	lines := []string{
		"set -e",
		"mount -t tmpfs -o mode=0755 lab-run /run",
		"mkdir -p /run/image",
		"mount --bind " + ShellQuote(r.env.containers.ImageDir) + " /run/image",
	}
	if tokenIn(r.pod, c) {
		lines = append(lines, "mkdir -p /run/secrets/kubernetes.io/serviceaccount",
			"mount --bind "+ShellQuote(filepath.Join(r.podDir(), "sa"))+" /run/secrets/kubernetes.io/serviceaccount")
	}
	// Every volume is mounted under /run/.lab first, while the host's /tmp
	// (where the lab keeps the pods' directories) is still in view: a mount
	// at /tmp hides it.
	staged := map[string]bool{}
	mounts := slices.DeleteFunc(slices.Clone(c.VolumeMounts), func(m corev1.VolumeMount) bool {
		return serviceAccountVolume(podVolume(r.pod, m.Name))
	})
	for _, m := range mounts {
		if !staged[m.Name] {
			staged[m.Name] = true
			stage := "/run/.lab/volumes/" + m.Name
			lines = append(lines, "mkdir -p "+ShellQuote(stage),
				"mount --bind "+ShellQuote(filepath.Join(r.podDir(), "v", m.Name))+" "+ShellQuote(stage))
		}
	}
	sort.SliceStable(mounts, func(i, j int) bool { return len(mounts[i].MountPath) < len(mounts[j].MountPath) })
	var done []string
	for _, m := range mounts {
		mp := filepath.Clean(m.MountPath)
		under := mp == "/tmp" || strings.HasPrefix(mp, "/run/")
		for _, d := range done {
			under = under || strings.HasPrefix(mp, d+"/")
		}
		if !under {
			return "", fmt.Errorf("volume mount %s: the lab's containers share the host's root filesystem, so a mount must be /tmp, under /run or under another mount", mp)
		}
		src := filepath.Join("/run/.lab/volumes", m.Name, m.SubPath)
		lines = append(lines, "mkdir -p "+ShellQuote(mp), "mount --bind "+ShellQuote(src)+" "+ShellQuote(mp))
		if m.ReadOnly {
			lines = append(lines, "mount -o remount,bind,ro "+ShellQuote(mp))
		}
		done = append(done, mp)
	}
	// The container's working directory: its workingDir, or the image's
	// root (not the lab's, which a mount at /tmp may hide: HAProxy fails
	// to check a configuration when it cannot get back to its directory).
	wd := c.WorkingDir
	if wd == "" {
		wd = "/"
	}
	// The container has started (an exec probe runs in it from now on).
	lines = append(lines, "mkdir -p "+path.Dir(containerStarted), ": > "+containerStarted,
		"cd "+ShellQuote(wd), `exec "$@"`)
	return strings.Join(lines, "\n"), nil
}

func ShellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// containerEnvVars is the container's environment as the kubelet gives it,
// as NAME=value pairs: PATH, HOSTNAME, the API server's address, then the
// container's env in order (values expanded against what came before).
func containerEnvVars(pod *corev1.Pod, c *corev1.Container, podIP, hostIP string) []string {
	host, port, _ := strings.Cut(APIServerInNetns, ":")
	env := []string{
		"PATH=/run/image:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOSTNAME=" + pod.Name,
		"KUBERNETES_SERVICE_HOST=" + host,
		"KUBERNETES_SERVICE_PORT=" + port,
	}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = pod.Name
			case "metadata.namespace":
				v = pod.Namespace
			case "metadata.uid":
				v = string(pod.UID)
			case "spec.nodeName":
				v = pod.Spec.NodeName
			case "spec.serviceAccountName":
				v = pod.Spec.ServiceAccountName
			case "status.podIP":
				v = podIP
			case "status.hostIP":
				v = hostIP
			}
		} else {
			v = expand(v, env)
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}

func expandArgs(args, env []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expand(a, env)
	}
	return out
}

// expand replaces $(NAME) with NAME's value in env (the last one wins), as
// the kubelet does: $$ is a literal $, and a reference to an unknown name
// is left as it is.
func expand(s string, env []string) string {
	lookup := func(name string) (string, bool) {
		for i := len(env) - 1; i >= 0; i-- {
			if k, v, _ := strings.Cut(env[i], "="); k == name {
				return v, true
			}
		}
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
