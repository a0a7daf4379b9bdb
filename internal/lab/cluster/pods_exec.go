package cluster

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/supervisor"
)

// containerStarted is the file mountScript creates in a container's own
// /run once its mounts are made: before it, the container's first process
// is still the lab's mount script, which a runtime never lets a probe see.
const containerStarted = "/run/.lab/started"

// execProbe runs an exec probe's command in container c as a runtime's
// exec does: inside the running container (nsenter into its first
// process's mount and network namespaces, so it sees the container's /run,
// /run/image, emptyDirs and token, and the pod's or node's network), in the
// container's working directory, with the container's environment. Exit 0
// is a success. On ctx's end (the probe's timeoutSeconds) the command's
// process group is killed and waited for, so no probe outlives its
// timeout. Only a chart pod's containers are processes; a web pod's
// container has nothing to run in and counts as ready, as before.
func (r *podRuntime) execProbe(ctx context.Context, c *corev1.Container, command []string) (ok bool, detail string) {
	if r.env.containers == nil || len(command) == 0 {
		return true, "not run"
	}
	pid, running := r.containerPid(c.Name)
	if !running {
		return false, "container not running"
	}
	args := []string{"--target", strconv.Itoa(pid), "--mount", "--net", "--wd", "--",
		"/bin/sh", "-c", `test -e ` + containerStarted + ` || { echo "container not started" >&2; exit 1; }; exec "$@"`, "sh",
		"env", "-i"}
	args = append(args, containerEnvVars(r.pod, c, r.ip.String(), r.env.hostIP)...)
	args = append(args, execCommand(command, c.Env)...)
	out, err := os.CreateTemp(r.podDir(), "probe-")
	if err != nil {
		return false, fmt.Sprintf("probe output: %v", err)
	}
	defer func() {
		out.Close()
		os.Remove(out.Name())
	}()
	// A file, not a pipe: the wait below ends with the process group,
	// whatever a child that left the group holds open.
	p, err := supervisor.Start(supervisor.Spec{Name: "nsenter", Args: args, Stdout: out, Stderr: out})
	if err != nil {
		return false, err.Error()
	}
	timedOut := false
	select {
	case <-p.Done():
	case <-ctx.Done():
		timedOut = true
		p.Signal(syscall.SIGKILL)
		<-p.Done()
	}
	// Children of the probe that outlived it (a command's background job).
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	head := make([]byte, 512)
	n, _ := out.ReadAt(head, 0)
	line, _, _ := strings.Cut(strings.TrimSpace(string(head[:n])), "\n")
	switch code := p.ExitCode(); {
	case timedOut:
		return false, "timed out"
	case code != 0:
		return false, fmt.Sprintf("exit %d: %s", code, line)
	}
	return true, line
}

// containerPid is the PID of container name's first process, and whether
// it runs.
func (r *podRuntime) containerPid(name string) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cp := range r.containers {
		if cp.c.Name == name && cp.proc != nil && !cp.proc.Exited() && !r.crashed {
			return cp.proc.Pid(), true
		}
	}
	return 0, false
}

// execCommand is an exec probe's command as the kubelet runs it: $(NAME)
// expanded against the container's literal env values only (the kubelet's
// ExpandContainerCommandOnlyStatic: a value from a field is not expanded),
// and the image's /zerodrop, which the lab mounts at /run/image.
func execCommand(command []string, env []corev1.EnvVar) []string {
	var static []string
	for _, e := range env {
		if e.ValueFrom == nil {
			static = append(static, e.Name+"="+e.Value)
		}
	}
	out := expandArgs(command, static)
	if out[0] == "/zerodrop" {
		out[0] = "/run/image/zerodrop"
	}
	return out
}
