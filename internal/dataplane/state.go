// Package dataplane is what the gates need from an HAProxy data plane of
// several replicas (each an HAProxy written only by its own zerodrop
// process): a read-only state endpoint each replica serves, a view of one
// replica's load balancer read through it, and the list of replicas that
// count — those whose HAProxy can receive traffic. The pod gates read every
// replica that counts (lbtarget.Finder.Replicas): a pod is served only when
// all serve it, drained only when all have it drained.
package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// BackendsPath is the state endpoint's one resource: GET
// /v1/backends?key=<load balancer key> answers the replica's
// provider.BackendStatus list for that load balancer as JSON (an empty list
// when it has none).
const BackendsPath = "/v1/backends"

// LoadBalancerPath is the state endpoint's other resource: GET
// /v1/loadbalancer?key=<load balancer key> answers the replica's observed
// load balancer (model.LoadBalancer) as JSON, or null when it has none. The
// control role reads it to set a Service's Ready condition and to let a
// deleted Service's finalizer go.
const LoadBalancerPath = "/v1/loadbalancer"

// StateSource is what a replica's state endpoint reads: its load balancers
// and their backends, read only. Peek is Observe without its side effects
// (the HAProxy provider's Observe may write its configuration file): a read
// of the endpoint never makes the replica write.
type StateSource interface {
	Peek(ctx context.Context, key string) (*model.LoadBalancer, error)
	Backends(ctx context.Context, key string) ([]provider.BackendStatus, error)
}

// StateHandler serves prov's backend status and load balancers read-only. A
// failed read is a 503 with the error: the caller treats it as no answer and
// waits.
func StateHandler(prov StateSource) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+LoadBalancerPath, read(func(ctx context.Context, key string) (any, error) {
		return prov.Peek(ctx, key)
	}))
	mux.Handle("GET "+BackendsPath, read(func(ctx context.Context, key string) (any, error) {
		bs, err := prov.Backends(ctx, key)
		if bs == nil {
			bs = []provider.BackendStatus{}
		}
		return bs, err
	}))
	return mux
}

// read serves what get reads of the load balancer named by the key
// parameter, as JSON.
func read(get func(ctx context.Context, key string) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("key")
		if key == "" {
			http.Error(w, "key is required", http.StatusBadRequest)
			return
		}
		v, err := get(r.Context(), key)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	})
}

// ErrReadOnly is what a Remote answers to writes: a replica's load balancer
// is written by that replica's own zerodrop process only.
var ErrReadOnly = errors.New("dataplane: a replica's load balancer is read-only from outside it")

// Remote is one replica's load balancer as its state endpoint shows it. It
// implements provider.Provider for reading backends only.
type Remote struct {
	// Replica names the replica in messages; BaseURL is its state endpoint
	// (https://ADDR:PORT).
	Replica string
	BaseURL string
	// Client is the HTTP client; it must verify the replica (Discovery's
	// clients accept only the certificate naming the replica's pod).
	Client *http.Client
}

var _ provider.Provider = (*Remote)(nil)

func (r *Remote) Name() string                            { return "haproxy-replica" }
func (r *Remote) Unsupported() map[model.Protocol]bool    { return nil }
func (r *Remote) Apply(context.Context, model.Plan) error { return ErrReadOnly }
func (r *Remote) Delete(context.Context, string) error    { return ErrReadOnly }

// Backends reads the replica's backends of the load balancer key.
func (r *Remote) Backends(ctx context.Context, key string) ([]provider.BackendStatus, error) {
	var bs []provider.BackendStatus
	if err := r.get(ctx, BackendsPath, key, &bs); err != nil {
		return nil, err
	}
	return bs, nil
}

// Observe reads the replica's load balancer key (nil: it has none).
func (r *Remote) Observe(ctx context.Context, key string) (*model.LoadBalancer, error) {
	var lb *model.LoadBalancer
	if err := r.get(ctx, LoadBalancerPath, key, &lb); err != nil {
		return nil, err
	}
	return lb, nil
}

// get reads one resource of the state endpoint into out.
func (r *Remote) get(ctx context.Context, path, key string, out any) error {
	c := r.Client
	if c == nil {
		return fmt.Errorf("replica %s: no verified client", r.Replica)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.BaseURL+path+"?key="+url.QueryEscape(key), nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("replica %s: %w", r.Replica, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("replica %s: %w", r.Replica, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("replica %s: %s: %s", r.Replica, resp.Status, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("replica %s: %w", r.Replica, err)
	}
	return nil
}

// Fleet stands for the data plane's load balancers in a controller of the
// control role, which writes none of them: it names the provider (the
// Services' default class follows it) and the protocols it cannot balance.
// Reads and writes are refused: the replicas are read one by one (Remote).
type Fleet struct {
	ProviderName string
	Protocols    map[model.Protocol]bool
}

var _ provider.Provider = Fleet{}

func (f Fleet) Name() string                            { return f.ProviderName }
func (f Fleet) Unsupported() map[model.Protocol]bool    { return f.Protocols }
func (f Fleet) Apply(context.Context, model.Plan) error { return ErrReadOnly }
func (f Fleet) Delete(context.Context, string) error    { return ErrReadOnly }
func (f Fleet) Observe(context.Context, string) (*model.LoadBalancer, error) {
	return nil, ErrReadOnly
}
func (f Fleet) Backends(context.Context, string) ([]provider.BackendStatus, error) {
	return nil, ErrReadOnly
}
