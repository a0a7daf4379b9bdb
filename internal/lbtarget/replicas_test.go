package lbtarget

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// readLog records the reads of the replicas' backends, and which were in
// flight together.
type readLog struct {
	mu       sync.Mutex
	inFlight map[string]bool // "replica key" of the reads not returned yet
	// overlapped: the reads of the answering replica that started while a
	// read of the silent replica for the same key was in flight.
	overlapped map[string]bool
	silent     int // reads of the silent replica in flight
	maxSilent  int
	answered   chan string
	// started[key] is closed when the silent replica's read of key starts.
	started map[string]chan struct{}
}

// silentReplica never answers: its state endpoint accepts and says nothing
// (each read ends only with its context).
type silentReplica struct {
	provider.Provider
	name string
	log  *readLog
}

func (s silentReplica) Backends(ctx context.Context, key string) ([]provider.BackendStatus, error) {
	l := s.log
	l.mu.Lock()
	if !l.inFlight[s.name+" "+key] {
		close(l.started[key])
	}
	l.inFlight[s.name+" "+key] = true
	l.silent++
	l.maxSilent = max(l.maxSilent, l.silent)
	l.mu.Unlock()
	<-ctx.Done()
	l.mu.Lock()
	delete(l.inFlight, s.name+" "+key)
	l.silent--
	l.mu.Unlock()
	return nil, ctx.Err()
}

// answeringReplica answers, once the silent replica's read of the same load
// balancer is in flight (or ctx ends): the pod's backend is active.
type answeringReplica struct {
	provider.Provider
	silent string
	log    *readLog
}

func (a answeringReplica) Backends(ctx context.Context, key string) ([]provider.BackendStatus, error) {
	l := a.log
	select {
	case <-l.started[key]:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	l.mu.Lock()
	if l.inFlight[a.silent+" "+key] {
		l.overlapped[key] = true
	}
	l.mu.Unlock()
	a.log.answered <- key
	svc := strings.TrimPrefix(key, ns+"/")
	return []provider.BackendStatus{{Listener: listener(svc), Address: "10.1.0.1", Port: 8080, State: model.Active}}, nil
}

// TestTargetsReadsReplicasAtOnce: one Targets call reads every replica, and
// every load balancer of the pod on each, at the same time, so that a
// replica that never answers costs one read's wait, not one per read; the
// answering replica's reads are made while the silent one's are in flight.
// The call fails naming the silent replica (the gates then wait).
func TestTargetsReadsReplicasAtOnce(t *testing.T) {
	p := pod("10.1.0.1")
	objs := []client.Object{node(), p, service("web", "web"), service("web2", "web")}
	reader := fake.NewClientBuilder().WithObjects(objs...).Build()
	log := &readLog{inFlight: map[string]bool{}, overlapped: map[string]bool{}, answered: make(chan string, 10),
		started: map[string]chan struct{}{ns + "/web": make(chan struct{}), ns + "/web2": make(chan struct{})}}
	// The silent replica comes first: read one after another, nothing
	// after it would ever be read; the answering one answers only while the
	// silent one's read of the same load balancer is in flight.
	f := &Finder{Reader: reader, Services: classServices{},
		Replicas: func(context.Context) ([]Replica, error) {
			return []Replica{
				{Name: "dp-a", Provider: silentReplica{name: "dp-a", log: log}},
				{Name: "dp-b", Provider: answeringReplica{silent: "dp-a", log: log}},
			}, nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		targets []Target
		err     error
	}
	done := make(chan result, 1)
	go func() {
		ts, err := f.Targets(ctx, p)
		done <- result{ts, err}
	}()
	// Both load balancers read on dp-b while dp-a's reads hang (the bound
	// is only for a failure: it is met at once when the reads overlap).
	var answered []string
	bound := time.After(30 * time.Second)
	for len(answered) < 2 {
		select {
		case key := <-log.answered:
			answered = append(answered, key)
		case <-bound:
			log.mu.Lock()
			t.Errorf("dp-b read only for %q while dp-a's reads hang (dp-a's reads in flight: %d), want for both load balancers: the replicas are not read at once",
				answered, log.silent)
			log.mu.Unlock()
			cancel()
			<-done
			return
		}
	}
	log.mu.Lock()
	overlapped, maxSilent := log.overlapped, log.maxSilent
	log.mu.Unlock()
	var keys []string
	for k := range overlapped {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if strings.Join(keys, " ") != ns+"/web "+ns+"/web2" {
		t.Errorf("dp-b's reads made while dp-a's read of the same load balancer was in flight: %q, want both", keys)
	}
	select {
	case r := <-done:
		t.Fatalf("Targets returned (%v, %v) while dp-a had not answered", Describe(r.targets), r.err)
	default:
	}
	// dp-a never answers: the call ends with its context, naming dp-a.
	cancel()
	r := <-done
	if r.err == nil || !errors.Is(r.err, context.Canceled) || !strings.Contains(r.err.Error(), "dp-a") {
		t.Errorf("Targets = (%v, %v), want an error naming data-plane replica dp-a", Describe(r.targets), r.err)
	}
	if maxSilent != 2 {
		t.Errorf("at most %d of dp-a's reads in flight at once, want both (one per load balancer)", maxSilent)
	}
}

// staticReplica answers its backends of every load balancer, or err.
type staticReplica struct {
	provider.Provider
	statuses []provider.BackendStatus
	err      error
	reads    *int
}

func (s staticReplica) Backends(_ context.Context, _ string) ([]provider.BackendStatus, error) {
	*s.reads++
	return s.statuses, s.err
}

// TestTerminatingReplicaNotAskedForReadiness: a replica whose pod is being
// deleted takes no new connection (its HAProxy stops softly), so the
// readiness gate's question — do new connections reach the pod? — skips
// it: during a data-plane surge the old pod drains for up to its grace
// period, and a rollout's new pods would wait for it. The termination
// gate's question still asks it (it holds connections to drain). With every
// replica terminating nothing can serve the pod: an error.
func TestTerminatingReplicaNotAskedForReadiness(t *testing.T) {
	p := pod("10.1.0.1")
	reader := fake.NewClientBuilder().WithObjects(node(), p, service("web", "web")).Build()
	served := []provider.BackendStatus{{Listener: listener("web"), Address: "10.1.0.1", Port: 8080, State: model.Active}}
	var oldReads, newReads int
	old := Replica{Name: "dp-old", Terminating: true,
		Provider: staticReplica{err: errors.New("soft-stopping: reload refused"), reads: &oldReads}}
	surge := Replica{Name: "dp-new", Provider: staticReplica{statuses: served, reads: &newReads}}
	finder := func(rs ...Replica) *Finder {
		return &Finder{Reader: reader, Services: classServices{},
			Replicas: func(context.Context) ([]Replica, error) { return rs, nil }}
	}
	ctx := context.Background()

	ts, err := finder(old, surge).Targets(ctx, p)
	if err != nil || len(ts) != 1 || ts[0].Replica != "dp-new" || !ts[0].Registered {
		t.Fatalf("readiness: Targets = (%s, %v), want dp-new's target only", Describe(ts), err)
	}
	if oldReads != 0 {
		t.Errorf("readiness: the terminating replica was read %d times, want none", oldReads)
	}

	deleting := p.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	if _, err := finder(old, surge).Targets(ctx, deleting); err == nil || !strings.Contains(err.Error(), "dp-old") {
		t.Errorf("termination: Targets error %v, want the terminating replica read (its error names dp-old)", err)
	}

	if ts, err := finder(old).Targets(ctx, p); err == nil || !strings.Contains(err.Error(), "terminating") {
		t.Errorf("readiness, every replica terminating: Targets = (%s, %v), want an error", Describe(ts), err)
	}
}
