package azure_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider/azure"
)

// callerDeadline stands in for "forever": the controller calls the provider
// without a deadline of its own, so a call that is still running when this
// deadline ends would have blocked its work item. It is far longer than
// anything these tests wait for when the provider's own deadlines work.
const callerDeadline = 30 * time.Second

// deadlineProvider connects a provider to emu with the given per-try timeout,
// poll deadline and poll frequency.
func deadlineProvider(t *testing.T, emu *azurearm.Emulator, try, poll, freq time.Duration) *azure.Provider {
	t.Helper()
	p, err := azure.New(context.Background(), azure.Options{
		SubscriptionID: subID, ResourceGroup: group, LoadBalancers: []string{"lb-a"}, SubnetID: subnet,
		Location: "westeurope", Credential: emu.Credential(), ClientOptions: emu.ClientOptions(),
		PollFrequency: freq, TryTimeout: try, PollTimeout: poll,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var oneService = &model.LoadBalancer{Key: "lb-a", Listeners: []model.Listener{
	listener("default", "web", 80, backends(8080, "10.0.0.1", "10.0.0.2")...),
}}

// TestHungRequestIsRetried: an ARM request that does not answer (here: not
// for an hour) is cut off by the per-try timeout and retried; the retry's
// answer is the call's. A read and a write, each with its first request hung.
func TestHungRequestIsRetried(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes int
		// prepare runs before the fault is set; it returns the call.
		prepare func(t *testing.T, p *azure.Provider) func(ctx context.Context) error
	}{{
		name: "observe",
		prepare: func(t *testing.T, p *azure.Provider) func(ctx context.Context) error {
			return func(ctx context.Context) error {
				obs, err := p.Observe(ctx, "lb-a")
				if err == nil && (obs == nil || len(obs.Listeners) != 1) {
					t.Errorf("observed %+v, want the one listener", obs)
				}
				return err
			}
		},
	}, {
		name: "pool write", writes: 1,
		prepare: func(t *testing.T, p *azure.Provider) func(ctx context.Context) error {
			obs, err := p.Observe(context.Background(), "lb-a")
			if err != nil {
				t.Fatal(err)
			}
			want := model.Canonical(oneService)
			want.Listeners[0].Backends = backends(8080, "10.0.0.2", "10.0.0.3")
			plan := model.Diff(obs, fill(want, obs))
			return func(ctx context.Context) error { return p.Apply(ctx, plan) }
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			emu := azurearm.New(azurearm.Options{})
			p := deadlineProvider(t, emu, 250*time.Millisecond, time.Minute, 5*time.Millisecond)
			converge(t, p, oneService)
			call := tc.prepare(t, p)
			// The next request hangs; the load balancer's later ones answer.
			emu.SetFaults(azurearm.Faults{Rate: 1, Slow: 1, SlowDelay: time.Hour, Cooldown: 1 << 30})
			before := emu.Counters()
			ctx, cancel := context.WithTimeout(context.Background(), callerDeadline)
			defer cancel()
			err := call(ctx)
			d := emu.Counters().Sub(before)
			if ctx.Err() != nil {
				t.Fatalf("the call ran into the caller's deadline (%v): the hung request was never cut off; %+v", err, d)
			}
			if err != nil {
				t.Fatalf("%v, want the retry's answer; %+v", err, d)
			}
			if d.Slow != 1 || d.Gets+d.Puts() < 2 || d.Writes != tc.writes {
				t.Errorf("%+v, want one hung request and its retry, %d write(s)", d, tc.writes)
			}
		})
	}
}

// TestHungARMFailsTheCall: when every try hangs, the call fails with the
// per-try timeout's error after the SDK's retries, and does not wait for the
// caller's own deadline (the controller's work item has none).
func TestHungARMFailsTheCall(t *testing.T) {
	emu := azurearm.New(azurearm.Options{})
	p := deadlineProvider(t, emu, 250*time.Millisecond, time.Minute, 5*time.Millisecond)
	converge(t, p, oneService)
	emu.SetFaults(azurearm.Faults{Rate: 1, Slow: 1, SlowDelay: time.Hour})
	before := emu.Counters()
	ctx, cancel := context.WithTimeout(context.Background(), callerDeadline)
	defer cancel()
	_, err := p.Observe(ctx, "lb-a")
	d := emu.Counters().Sub(before)
	if ctx.Err() != nil {
		t.Fatalf("Observe ran into the caller's deadline (%v): no try was cut off; %+v", err, d)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Observe: %v, want the per-try deadline's error", err)
	}
	if d.Gets < 2 {
		t.Errorf("%d GETs, want the hung one retried before the call fails", d.Gets)
	}
}

// TestSlowWriteWithinPollDeadline: a write ARM has accepted and that takes
// longer than the per-try timeout to complete (20 polls at least 50 ms apart,
// against a per-try timeout of 250 ms) succeeds: the per-try timeout bounds
// each request, not the wait for the operation.
func TestSlowWriteWithinPollDeadline(t *testing.T) {
	const steps = 20
	emu := azurearm.New(azurearm.Options{PollSteps: steps})
	p := deadlineProvider(t, emu, 250*time.Millisecond, time.Minute, 50*time.Millisecond)
	before := emu.Counters()
	ctx, cancel := context.WithTimeout(context.Background(), callerDeadline)
	defer cancel()
	obs, err := p.Observe(ctx, "lb-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(ctx, model.Diff(obs, oneService)); err != nil {
		t.Fatalf("the create, polled %d times: %v", emu.Counters().Sub(before).Polls, err)
	}
	if d := emu.Counters().Sub(before); d.Writes != 1 || d.Polls < steps {
		t.Errorf("%+v, want one write polled at least %d times", d, steps)
	}
	if _, ok := emu.LoadBalancer(group, "lb-a"); !ok {
		t.Error("no load balancer after the create")
	}
}

// TestPollDeadline: a write ARM has accepted but never completes is waited
// for until the poll deadline, then the call fails with that deadline's error
// instead of polling until the caller's.
func TestPollDeadline(t *testing.T) {
	// 100,000 "in progress" answers at least 5 ms apart: over 8 minutes.
	emu := azurearm.New(azurearm.Options{PollSteps: 100_000})
	p := deadlineProvider(t, emu, 250*time.Millisecond, time.Second, 5*time.Millisecond)
	before := emu.Counters()
	ctx, cancel := context.WithTimeout(context.Background(), callerDeadline)
	defer cancel()
	obs, err := p.Observe(ctx, "lb-a")
	if err != nil {
		t.Fatal(err)
	}
	err = p.Apply(ctx, model.Diff(obs, oneService))
	d := emu.Counters().Sub(before)
	if ctx.Err() != nil {
		t.Fatalf("the write ran into the caller's deadline (%v): the poll had no deadline of its own; %+v", err, d)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Apply: %v, want the poll deadline's error", err)
	}
	if d.Writes != 1 || d.Polls < 2 {
		t.Errorf("%+v, want one accepted write, polled until the deadline", d)
	}
}
