package azure

import (
	"context"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// The ARM calls. Every write carries a precondition (If-Match on the ETag
// the plan was computed against, or If-None-Match: * to create) and waits
// for its long-running operation with the SDK's poller; errors go through
// classify, so 412 and 429 reach the controller as what they mean.

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
	if _, err := poller.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: p.opts.PollFrequency}); err != nil {
		return p.classify("wait for load balancer "+key, err)
	}
	return nil
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
	if _, err := poller.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: p.opts.PollFrequency}); err != nil {
		return p.classify("wait for backend pool "+key+"/"+*pw.pool.Name, err)
	}
	return nil
}

func (p *Provider) deleteLB(ctx context.Context, key, etag string) error {
	p.opts.Hooks.OnWrite("delete-lb")
	poller, err := p.lbs.BeginDelete(runtime.WithHTTPHeader(ctx, http.Header{"If-Match": {etag}}), p.opts.ResourceGroup, key, nil)
	if err != nil {
		return p.classify("delete load balancer "+key, err)
	}
	if _, err := poller.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: p.opts.PollFrequency}); err != nil {
		return p.classify("wait for load balancer deletion "+key, err)
	}
	return nil
}
