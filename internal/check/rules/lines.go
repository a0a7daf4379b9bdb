package rules

import (
	"runtime"
	"strings"
	"sync"

	"zerodrop.dev/zerodrop/internal/check/manifest"
)

// fieldPaths says where in an object the field a rule is about is written,
// most precise first, so that a finding points at the line to change: the
// container for container rules (its probe or preStop hook when the rule is
// about one), the strategy for ZD301/ZD302. A rule without such a field (no
// PodDisruptionBudget, no spreading) points at the object.
func fieldPaths(kind, rule, container string) [][]string {
	if kind == manifest.KindService {
		switch rule {
		case "ZD402":
			return [][]string{{"spec", "ports"}}
		case "ZD403":
			return [][]string{{"spec", "selector"}}
		}
		return nil
	}
	pod := []string{"spec", "template", "spec"}
	if kind == manifest.KindPod {
		pod = []string{"spec"}
	}
	join := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	if container != "" {
		var paths [][]string
		for _, list := range []string{"containers", "initContainers"} {
			ctr := join(pod, []string{list, "name=" + container})
			switch rule {
			case "ZD102":
				paths = append(paths, join(ctr, []string{"readinessProbe"}))
			case "ZD105":
				paths = append(paths, join(ctr, []string{"livenessProbe"}))
			case "ZD201", "ZD202", "ZD208":
				paths = append(paths, join(ctr, []string{"lifecycle", "preStop"}))
			case "ZD207":
				paths = append(paths, join(ctr, []string{"command"}))
			case "ZD203", "ZD205":
				paths = append(paths, join(pod, []string{"terminationGracePeriodSeconds"}))
			}
			paths = append(paths, ctr)
		}
		return paths
	}
	switch rule {
	case "ZD301", "ZD302":
		if kind == manifest.KindDeployment {
			return [][]string{{"spec", "strategy"}}
		}
		return [][]string{{"spec", "updateStrategy"}}
	case "ZD303", "ZD305":
		return [][]string{{"spec", "replicas"}}
	case "ZD104":
		return [][]string{{"spec", "minReadySeconds"}}
	case "ZD103":
		return [][]string{join(pod, []string{"readinessGates"})}
	case "ZD404":
		return [][]string{join(pod, []string{"topologySpreadConstraints"}), join(pod, []string{"affinity", "podAntiAffinity"})}
	}
	return nil
}

func kindOf(object string) string {
	kind, _, _ := strings.Cut(object, "/")
	return kind
}

// ResolveLines sets each finding's Line to its field's line. It reads the
// documents' positions, which costs about a second parse of each document
// with a finding, so only the outputs that print field lines (JSON, SARIF)
// call it. Large reports are resolved on every CPU: the documents are
// independent, and each parses its positions once however many findings ask.
func (r Report) ResolveLines() {
	resolve := func(i int) {
		f := &r.Findings[i]
		f.Line = f.at.Field(f.fields...)
	}
	workers := runtime.GOMAXPROCS(0)
	if len(r.Findings) < 64 || workers < 2 {
		for i := range r.Findings {
			resolve(i)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int, workers)
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for i := range next {
				resolve(i)
			}
		})
	}
	for i := range r.Findings {
		next <- i
	}
	close(next)
	wg.Wait()
}
