package scenarios

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
	"zerodrop.dev/zerodrop/internal/model"
)

// statePeriod is how often the sampler reads HAProxy's backends.
const statePeriod = 250 * time.Millisecond

// sampleStates reads the run's backends of the Service's first port from
// HAProxy every statePeriod until ctx ends and returns each backend's
// state changes since start, in order of first appearance; a sample with a
// backend doubled counts in r.dupSamples. A read that
// fails is skipped (the next one catches up).
func (r *run) sampleStates(ctx context.Context, start time.Time) []report.BackendLane {
	listener := model.ListenerName(r.ns, appName, corev1.ProtocolTCP, servicePort)
	var lanes []*report.BackendLane
	byName := map[string]*report.BackendLane{}
	for {
		if bs, err := r.world.Backends(ctx, r.addr); err == nil {
			at := time.Since(start)
			if duplicates(bs, listener) > 0 {
				r.dupSamples.Add(1)
			}
			seen := map[string]bool{}
			for _, b := range bs {
				if b.Listener != listener {
					continue
				}
				name := fmt.Sprintf("%s:%d", b.Address, b.Port)
				seen[name] = true
				lane := byName[name]
				if lane == nil {
					lane = &report.BackendLane{Backend: name}
					byName[name] = lane
					lanes = append(lanes, lane)
				}
				lane.Add(at, haproxyState(b.State, b.Healthy))
			}
			for name, lane := range byName {
				if !seen[name] {
					lane.Add(at, report.StateRemoved)
				}
			}
		}
		if !traffic.SleepCtx(ctx, statePeriod) {
			break
		}
	}
	out := make([]report.BackendLane, len(lanes))
	for i, l := range lanes {
		out[i] = *l
	}
	return out
}

// haproxyState names a backend's state as HAProxy's stats page does: the
// admin state first (DRAIN, MAINT), then the health check's verdict.
func haproxyState(s model.BackendState, healthy bool) string {
	switch {
	case s == model.Draining:
		return report.StateDrain
	case s != model.Active:
		return report.StateMaint
	case healthy:
		return report.StateUp
	default:
		return report.StateDown
	}
}
