package lab

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/model"
)

// Backend states as HAProxy shows them (and the HTML report draws them).
const (
	stateUp      = "UP"
	stateDown    = "DOWN"
	stateDrain   = "DRAIN"
	stateMaint   = "MAINT"
	stateRemoved = "removed"
)

// stateSpan is a backend's state from At on (until the next span).
type stateSpan struct {
	At    time.Duration
	State string
}

// backendLane is one backend of the Service's first port over a run.
type backendLane struct {
	Backend string // address:port
	Spans   []stateSpan
}

// statePeriod is how often the sampler reads HAProxy's backends.
const statePeriod = 250 * time.Millisecond

// sampleStates reads the run's backends of the Service's first port from
// HAProxy every statePeriod until ctx ends and returns each backend's
// state changes since start, in order of first appearance; a sample with a
// backend doubled counts in r.dupSamples. A read that
// fails is skipped (the next one catches up).
func (r *run) sampleStates(ctx context.Context, start time.Time) []backendLane {
	listener := model.ListenerName(r.ns, appName, corev1.ProtocolTCP, servicePort)
	var lanes []*backendLane
	byName := map[string]*backendLane{}
	for {
		if bs, err := r.backends(ctx, r.prov); err == nil {
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
					lane = &backendLane{Backend: name}
					byName[name] = lane
					lanes = append(lanes, lane)
				}
				lane.add(at, haproxyState(b.State, b.Healthy))
			}
			for name, lane := range byName {
				if !seen[name] {
					lane.add(at, stateRemoved)
				}
			}
		}
		if !sleepCtx(ctx, statePeriod) {
			break
		}
	}
	out := make([]backendLane, len(lanes))
	for i, l := range lanes {
		out[i] = *l
	}
	return out
}

func (l *backendLane) add(at time.Duration, state string) {
	if n := len(l.Spans); n == 0 || l.Spans[n-1].State != state {
		l.Spans = append(l.Spans, stateSpan{At: at, State: state})
	}
}

// haproxyState names a backend's state as HAProxy's stats page does: the
// admin state first (DRAIN, MAINT), then the health check's verdict.
func haproxyState(s model.BackendState, healthy bool) string {
	switch {
	case s == model.Draining:
		return stateDrain
	case s != model.Active:
		return stateMaint
	case healthy:
		return stateUp
	default:
		return stateDown
	}
}
