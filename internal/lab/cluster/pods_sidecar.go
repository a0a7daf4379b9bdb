package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
)

// Native sidecars (restartable init containers) of web pods, as the kubelet
// runs them: started before the app's containers, stopped after them — so
// after the app's preStop hooks — with SIGTERM. The only one the lab can run
// is zerodrop's own image: the drain relay the webhook injects (its
// `/zerodrop <args…>` runs as `<the lab's zerodrop build> <args…>` in the
// pod's namespace). A web pod with another sidecar is refused.

// sidecars returns the pod's restartable init containers, in order.
func sidecars(pod *corev1.Pod) []*corev1.Container {
	var out []*corev1.Container
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out = append(out, c)
		}
	}
	return out
}

// startSidecars starts the pod's sidecars; on an error it stops those it
// started.
func (r *podRuntime) startSidecars() error {
	for _, c := range sidecars(r.pod) {
		if c.Image != ControllerImage && (r.env.containers == nil || !chartImage(c.Image)) {
			r.stopSidecars(0)
			return fmt.Errorf("sidecar %s: image %q: the lab runs only zerodrop's image as a sidecar", c.Name, c.Image)
		}
		p, err := r.startContainerProcess(c, "sidecar", r.pod.Namespace+"_"+r.pod.Name+"_"+c.Name+".log")
		if err != nil {
			r.stopSidecars(0)
			return fmt.Errorf("sidecar %s: %w", c.Name, err)
		}
		r.mu.Lock()
		r.sidecars = append(r.sidecars, p)
		r.mu.Unlock()
	}
	return nil
}

// startContainerProcess runs a container of zerodrop's image in the pod's
// namespace: `<the lab's zerodrop> <its args…>` with the container's literal
// environment and ChildEnv=child (for a test binary's TestMain), its output
// in the log directory's logName.
func (r *podRuntime) startContainerProcess(c *corev1.Container, child, logName string) (*netlab.Process, error) {
	logFile, err := os.OpenFile(filepath.Join(r.env.logDir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	// The kubelet sets HOSTNAME to the pod's name.
	args := []string{ChildEnv + "=" + child, "HOSTNAME=" + r.pod.Name}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			args = append(args, e.Name+"="+e.Value)
		}
	}
	exe := r.env.exe
	if c.Image != ControllerImage {
		// The chart's image (its drain relay): the production build.
		exe = filepath.Join(r.env.containers.ImageDir, "zerodrop")
	}
	args = append(append(args, exe), c.Args...)
	// env(1) sets the environment and execs: the process keeps its PID.
	return r.env.lab.Start(r.netPod.Netns, logFile, logFile, "env", args...)
}

// stopSidecars sends each sidecar SIGTERM, in reverse order as the kubelet
// does, and kills what is left after grace.
// The pod's stop and the lab's teardown may both get here: whichever takes
// the list stops them.
func (r *podRuntime) stopSidecars(grace time.Duration) {
	r.mu.Lock()
	list := r.sidecars
	r.sidecars = nil
	r.mu.Unlock()
	for _, p := range slices.Backward(list) {
		if grace > 0 {
			p.Signal(syscall.SIGTERM)
			select {
			case <-p.Done():
			case <-time.After(grace):
			}
		}
		p.Signal(syscall.SIGKILL)
		<-p.Done()
	}
}

// ChildEnv is set in the environment of the controller processes the lab
// starts by running its own binary with `controller` arguments. A test
// binary, which has no `controller` subcommand, looks for it in TestMain.
const ChildEnv = "ZERODROP_LAB_CHILD"
