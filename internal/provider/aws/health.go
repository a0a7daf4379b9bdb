package aws

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
)

// Target health, read with DescribeTargetHealth once per target group and
// shared: every gate that asks about a group within HealthMaxAge of the
// last read's beginning gets that read's answer, and gates that ask while
// a read runs wait for it (one read, on a context of its own: a gate that
// gives up does not cancel it for the others). So the calls made are at
// most one per group per HealthMaxAge, for the groups some gate is
// waiting on, and every call waits for the budget (Options.QPS, Burst)
// first: past the budget the answers get older, the budget is not
// exceeded. A failed read is not made again for HealthMaxAge: the gates
// get its error meanwhile and look again later.

// healthForget is how long a group's entry outlives its last use.
const healthForget = 10 * time.Minute

// tgHealth is what is known of one target group's health.
type tgHealth struct {
	answer   []target
	since    map[string]time.Time // target key → unhealthy since (verdict.go)
	asked    time.Time            // when the read that answered began
	answered bool
	failed   time.Time // when the last read failed
	err      error
	used     time.Time
}

// targetHealth is the last answer for target group arn, read again when
// older than HealthMaxAge.
func (p *Provider) targetHealth(ctx context.Context, arn string) ([]target, map[string]time.Time, time.Time, error) {
	snapshot := func(h *tgHealth) ([]target, map[string]time.Time, time.Time, error) {
		if !h.answered {
			return nil, nil, time.Time{}, h.err
		}
		if h.err != nil && h.failed.After(h.asked) {
			return nil, nil, time.Time{}, h.err
		}
		return h.answer, h.since, h.asked, nil
	}
	p.mu.Lock()
	h := p.health[arn]
	if h == nil {
		h = &tgHealth{}
		p.health[arn] = h
	}
	now := time.Now()
	h.used = now
	fresh := h.answered && now.Sub(h.asked) < p.opts.HealthMaxAge || now.Sub(h.failed) < p.opts.HealthMaxAge
	if fresh {
		defer p.mu.Unlock()
		return snapshot(h)
	}
	p.mu.Unlock()
	ch := p.flights.DoChan("health/"+arn, func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.opts.ReadTimeout)
		defer cancel()
		p.readHealth(rctx, arn, h)
		return nil, nil
	})
	select {
	case <-ctx.Done():
		return nil, nil, time.Time{}, ctx.Err()
	case <-ch:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return snapshot(h)
}

// readHealth makes one DescribeTargetHealth of the group and keeps its
// answer in h.
func (p *Provider) readHealth(ctx context.Context, arn string, h *tgHealth) {
	err := p.wait(ctx, "DescribeTargetHealth")
	asked := time.Now()
	var out *elbv2.DescribeTargetHealthOutput
	if err == nil {
		out, err = p.opts.API.DescribeTargetHealth(ctx, &elbv2.DescribeTargetHealthInput{TargetGroupArn: aws.String(arn)})
	}
	answeredAt := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		h.failed, h.err = answeredAt, fmt.Errorf("describe target health: %w", err)
		return
	}
	answer := make([]target, 0, len(out.TargetHealthDescriptions))
	for _, d := range out.TargetHealthDescriptions {
		if d.Target == nil {
			continue
		}
		t := target{ID: aws.ToString(d.Target.Id), Port: aws.ToInt32(d.Target.Port)}
		if d.TargetHealth != nil {
			t.State, t.Reason = string(d.TargetHealth.State), string(d.TargetHealth.Reason)
		}
		answer = append(answer, t)
	}
	h.since = unhealthySince(h.since, answer, answeredAt)
	h.answer, h.asked, h.answered, h.err = answer, asked, true, nil
}

// prune forgets, at most once a minute, the groups and Services no gate
// asked about for healthForget. p.mu is held.
func (p *Provider) prune() {
	now := time.Now()
	if now.Sub(p.pruned) < time.Minute {
		return
	}
	p.pruned = now
	for k, h := range p.health {
		if now.Sub(h.used) >= healthForget {
			delete(p.health, k)
		}
	}
	for k, lk := range p.lookups {
		if now.Sub(lk.at) >= healthForget {
			delete(p.lookups, k)
		}
	}
}
