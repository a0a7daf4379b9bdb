package azure

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// The ARM calls. Every write carries a precondition (If-Match on the ETag
// the plan was computed against, or If-None-Match: * to create) and waits
// for its long-running operation with the SDK's poller; errors go through
// classify, so 412 and 429 reach the controller as what they mean. Every
// request's try is bounded by Options.TryTimeout (the SDK's retry policy);
// the wait for an accepted write by Options.PollTimeout (wait).

// get reads a load balancer; nil when it does not exist.
func (p *Provider) get(ctx context.Context, key string) (*armnetwork.LoadBalancer, error) {
	p.opts.Hooks.OnRead("get-lb")
	resp, err := p.lbs.Get(ctx, p.opts.ResourceGroup, key, nil)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, p.classify("get load balancer "+key, err)
	}
	return &resp.LoadBalancer, nil
}

// putLB writes the whole load balancer: If-Match on base's ETag, or
// If-None-Match: * to create it.
func (p *Provider) putLB(ctx context.Context, key string, lb *armnetwork.LoadBalancer, base *armnetwork.LoadBalancer) error {
	h := http.Header{}
	if base == nil {
		h.Set("If-None-Match", "*")
	} else {
		h.Set("If-Match", str(base.Etag))
	}
	p.opts.Hooks.OnWrite("put-lb")
	p.opts.Log.V(2).Info("put load balancer", "loadBalancer", key, "ifMatch", h.Get("If-Match"))
	poller, err := p.lbs.BeginCreateOrUpdate(runtime.WithHTTPHeader(ctx, h), p.opts.ResourceGroup, key, *lb, nil)
	if err != nil {
		return p.classify("put load balancer "+key, err)
	}
	return wait(ctx, p, poller, "wait for load balancer "+key)
}

// putPool writes one backend pool with If-Match on the pool's ETag as
// observed (the load balancer's: ARM versions them together).
func (p *Provider) putPool(ctx context.Context, key string, pw poolWrite) error {
	h := http.Header{"If-Match": {pw.etag}}
	p.opts.Hooks.OnWrite("put-pool")
	p.opts.Log.V(2).Info("put backend pool", "loadBalancer", key, "pool", *pw.pool.Name, "ifMatch", pw.etag)
	poller, err := p.pools.BeginCreateOrUpdate(runtime.WithHTTPHeader(ctx, h), p.opts.ResourceGroup, key, *pw.pool.Name, *pw.pool, nil)
	if err != nil {
		return p.classify("put backend pool "+key+"/"+*pw.pool.Name, err)
	}
	return wait(ctx, p, poller, "wait for backend pool "+key+"/"+*pw.pool.Name)
}

func (p *Provider) deleteLB(ctx context.Context, key, etag string) error {
	p.opts.Hooks.OnWrite("delete-lb")
	poller, err := p.lbs.BeginDelete(runtime.WithHTTPHeader(ctx, http.Header{"If-Match": {etag}}), p.opts.ResourceGroup, key, nil)
	if err != nil {
		return p.classify("delete load balancer "+key, err)
	}
	return wait(ctx, p, poller, "wait for load balancer deletion "+key)
}

// wait polls a long-running operation ARM has accepted until it ends, for at
// most Options.PollTimeout. Each poll is an ARM request like any other, so
// TryTimeout bounds it; the poll deadline bounds the whole wait, which
// can take far longer than one request should.
func wait[T any](ctx context.Context, p *Provider, poller *runtime.Poller[T], op string) error {
	pctx, cancel := context.WithTimeout(ctx, p.opts.PollTimeout)
	defer cancel()
	_, err := poller.PollUntilDone(pctx, &runtime.PollUntilDoneOptions{Frequency: p.opts.PollFrequency})
	if err == nil {
		return nil
	}
	// The poll deadline passed, or the read budget refused a poll whose
	// token would come after it, before it passed: when the poll deadline
	// is the earlier one, that is the poll deadline too, not a failure of
	// the write to classify.
	if ctx.Err() == nil && (pctx.Err() != nil || errors.Is(err, ErrReadBudget) && pollDeadlineBinds(ctx, pctx)) {
		if !errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: %w", err, context.DeadlineExceeded)
		}
		return fmt.Errorf("%s: not done after %s (ARM accepted the write; it may still complete): %w", op, p.opts.PollTimeout, err)
	}
	return p.classify(op, err)
}

// pollDeadlineBinds reports whether pctx, derived from ctx, ends before ctx.
func pollDeadlineBinds(ctx, pctx context.Context) bool {
	pdl, _ := pctx.Deadline()
	dl, ok := ctx.Deadline()
	return !ok || pdl.Before(dl)
}
