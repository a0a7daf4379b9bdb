package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// chartSets are -chart-set's values, given to `helm template` as --set.
var chartSets stringList

func init() {
	flag.Var(&chartSets, "chart-set", "a chart value (helm's --set, e.g. haproxy.resources.haproxy.limits.memory=2Gi) the memory limits are read with, to measure under a limit other than the default; repeatable")
}

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// chartLimits are the memory limits the chart gives its containers at its
// default values (a limit of 0: the chart sets none).
type chartLimits struct {
	// control is the Deployment's controller container (the control
	// role); dataPlane and haproxy the data-plane DaemonSet's controller
	// and haproxy containers.
	control, dataPlane, haproxy int64
}

// readChartLimits renders the repository's chart with `helm template` at
// its default values but those the haproxy provider requires (the
// provider, an address pool) and reads its containers' memory limits: the
// chart, not this tool, says what they are.
func readChartLimits(root string) (chartLimits, error) {
	helm, err := controlplane.Helm()
	if err != nil {
		return chartLimits{}, err
	}
	args := []string{"template", "zerodrop", filepath.Join(root, "charts", "zerodrop"), "--set", "provider=haproxy", "--set", "haproxy.addressPool=127.0.128.0/17"}
	for _, v := range chartSets {
		args = append(args, "--set", v)
	}
	out, err := supervisor.Output(context.Background(), supervisor.Command{Name: helm, Args: args})
	if err != nil {
		return chartLimits{}, fmt.Errorf("helm template: %w", err)
	}
	var l chartLimits
	found := map[string]bool{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var w struct {
			Kind string `json:"kind"`
			Spec struct {
				Template struct {
					Spec corev1.PodSpec `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := dec.Decode(&w); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return chartLimits{}, fmt.Errorf("the rendered chart: %w", err)
		}
		for _, ct := range w.Spec.Template.Spec.Containers {
			var into *int64
			switch {
			case w.Kind == "Deployment" && ct.Name == "controller":
				into = &l.control
			case w.Kind == "DaemonSet" && ct.Name == "controller":
				into = &l.dataPlane
			case w.Kind == "DaemonSet" && ct.Name == "haproxy":
				into = &l.haproxy
			default:
				continue
			}
			found[w.Kind+"/"+ct.Name] = true
			if q, ok := ct.Resources.Limits[corev1.ResourceMemory]; ok {
				*into = q.Value()
			}
		}
	}
	for _, want := range []string{"Deployment/controller", "DaemonSet/controller", "DaemonSet/haproxy"} {
		if !found[want] {
			return chartLimits{}, fmt.Errorf("the rendered chart has no %s container", want)
		}
	}
	return l, nil
}

// The measured processes' memory cgroups (nil: none) and the chart's
// limits they were given.
var (
	controllerCgroup, haproxyCgroup *memCgroup
	limits                          chartLimits
)

// setupMemoryLimits creates the cgroups of -memory-limit for the role: the
// controller's at its container's limit (the Deployment's for the control
// role, the data-plane DaemonSet's controller container's for the
// data-plane role) and, for the data-plane role, HAProxy's at the haproxy
// container's. The all role (one process that owns its HAProxy; no chart
// runs it) gets one cgroup for both at the data-plane pod's limit, its two
// containers' together, as the kubelet limits a pod. It returns what
// removes them.
func setupMemoryLimits(root string) (func(), error) {
	if !*memoryLimitFlag {
		return func() {}, nil
	}
	var err error
	if limits, err = readChartLimits(root); err != nil {
		return nil, fmt.Errorf("the chart's memory limits: %w", err)
	}
	var ctl int64
	switch *role {
	case "control":
		ctl = limits.control
	case "data-plane":
		ctl = limits.dataPlane
	case "all":
		if limits.dataPlane > 0 && limits.haproxy > 0 {
			ctl = limits.dataPlane + limits.haproxy
		}
	}
	remove := func() {
		for _, g := range []*memCgroup{controllerCgroup, haproxyCgroup} {
			if g != nil {
				g.remove()
			}
		}
	}
	if ctl > 0 {
		if controllerCgroup, err = newMemCgroup("controller", ctl); err != nil {
			return nil, err
		}
	}
	if *role == "data-plane" && limits.haproxy > 0 {
		if haproxyCgroup, err = newMemCgroup("haproxy", limits.haproxy); err != nil {
			remove()
			return nil, err
		}
	}
	return remove, nil
}

// controllerGoMemLimit is the controller's GOMEMLIMIT: -gomemlimit's, else
// in a memory cgroup what the controller would set itself in that
// container (controller.GoMemoryLimit of its limit; here, without a cgroup
// namespace, it would read the host's root cgroup instead), else none.
func controllerGoMemLimit() string {
	if *goMemLimit != "" {
		return *goMemLimit
	}
	if controllerCgroup != nil {
		return strconv.FormatInt(controller.GoMemoryLimit(controllerCgroup.limit), 10)
	}
	return ""
}

// memoryLimitsLine says, for the report, what limits the processes ran
// under.
func memoryLimitsLine() string {
	if !*memoryLimitFlag {
		return "memory limits: none (-memory-limit=false)" + map[bool]string{true: "; GOMEMLIMIT " + *goMemLimit + " (-gomemlimit)", false: ""}[*goMemLimit != ""]
	}
	v := "v1"
	if controllerCgroup != nil && controllerCgroup.v2 || haproxyCgroup != nil && haproxyCgroup.v2 {
		v = "v2"
	}
	values := "the chart's defaults"
	if len(chartSets) > 0 {
		values = "the chart with -chart-set " + chartSets.String()
	}
	s := fmt.Sprintf("memory limits (%s, cgroup %s): ", values, v)
	switch {
	case controllerCgroup == nil:
		s += "the controller: none (the chart sets none)"
	case *role == "all":
		s += fmt.Sprintf("the controller and its HAProxy together %s (the data-plane pod's controller %s + haproxy %s)", mib(uint64(controllerCgroup.limit)), mib(uint64(limits.dataPlane)), mib(uint64(limits.haproxy)))
	default:
		s += "the controller " + mib(uint64(controllerCgroup.limit))
	}
	if *role == "data-plane" {
		if haproxyCgroup != nil {
			s += fmt.Sprintf(", HAProxy (master and workers, started by zerodrop haproxy) %s", mib(uint64(haproxyCgroup.limit)))
		} else {
			s += ", HAProxy: none (the chart sets none)"
		}
	}
	if v := controllerGoMemLimit(); v != "" {
		how := "-gomemlimit"
		if *goMemLimit == "" {
			how = "passed by procmem: what the controller computes from its container's limit, which it cannot read here without a cgroup namespace"
		}
		if b, err := strconv.ParseInt(v, 10, 64); err == nil {
			v = fmt.Sprintf("%d (%s)", b, mib(uint64(b)))
		}
		s += "; GOMEMLIMIT " + v + ", " + how
	}
	return s
}
