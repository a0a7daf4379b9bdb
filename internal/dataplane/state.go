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
	"net"
	"net/http"
	"net/url"
	"strconv"

	"golang.org/x/sync/semaphore"

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

// MaxAnswerBytes bounds one replica's answer. The largest legitimate
// answer is one Service's at the scale the project reaches: 10,000
// endpoints behind one port, with the longest names and IPv6 addresses,
// encodes to about 1.0 MiB as a load balancer and about 3.0 MiB as backend
// statuses (TestAnswerCapCoversLargestService computes both from model
// values); 8 MiB leaves more than 2x headroom.
const MaxAnswerBytes = 8 << 20

// AnswerBudgetBytes bounds the answer bytes held by all reads of replicas
// in this process at once (the gates read many pods' replicas
// concurrently): four answers of the largest size. A read takes its share
// as it reads and waits for room within its own deadline, so replicas
// answering too much delay or fail reads instead of exhausting the control
// role's memory (256 MiB: decoded, an answer takes a few times its size).
const AnswerBudgetBytes = 4 * MaxAnswerBytes

// ErrReadOnly is what a Remote answers to writes: a replica's load balancer
// is written by that replica's own zerodrop process only.
var ErrReadOnly = errors.New("dataplane: a replica's load balancer is read-only from outside it")

// Remote is one replica's load balancer as its state endpoint shows it. It
// implements provider.Provider for reading backends only.
type Remote struct {
	// Replica names the replica in messages; BaseURL is its state endpoint
	// (https://ADDR:PORT), when it has one port. Discovery leaves it empty
	// for a replica whose endpoint may be at one of several ports (two
	// pods on one node): the port is found by its certificate (statePort).
	Replica string
	BaseURL string
	// Client is the HTTP client; it must verify the replica (Discovery's
	// clients accept only the certificate naming the replica's pod).
	Client *http.Client

	port *statePort
}

// StateURL is the state endpoint the replica is read at: BaseURL, or the
// URL of the port last found to serve it ("" while none is).
func (r *Remote) StateURL() string {
	if r.port == nil {
		return r.BaseURL
	}
	p := r.port.known()
	if p == 0 {
		return ""
	}
	return "https://" + net.JoinHostPort(r.port.host, strconv.Itoa(p))
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
	base, port := r.BaseURL, 0
	if r.port != nil {
		var err error
		if base, port, err = r.port.base(ctx); err != nil {
			return fmt.Errorf("replica %s: %w", r.Replica, err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path+"?key="+url.QueryEscape(key), nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		if r.port != nil {
			// The read fails (the gates wait); the next one probes the
			// ports again. An answer with an error status is the verified
			// replica's own and keeps its port.
			r.port.forget(port)
		}
		return fmt.Errorf("replica %s: %w", r.Replica, err)
	}
	defer resp.Body.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c.Timeout > 0 {
		// Waiting for answer budget counts against the read's bound.
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	body := &boundedBody{r: resp.Body, ctx: ctx, max: MaxAnswerBytes, sem: answerBudget}
	defer body.release()
	if resp.StatusCode != http.StatusOK {
		// An error's text is short; a few KiB of it are enough to say why.
		msg, _ := io.ReadAll(io.LimitReader(body, 4<<10))
		return fmt.Errorf("replica %s: %s: %s", r.Replica, resp.Status, msg)
	}
	// Decoded as it streams in: never more than the cap read, and the
	// bytes read held against the process' answer budget until decoded.
	if err := decode(json.NewDecoder(body), out); err != nil {
		if body.over {
			return fmt.Errorf("replica %s: answer larger than %d bytes (the largest legitimate one is a few MiB): refused", r.Replica, MaxAnswerBytes)
		}
		if body.exhausted {
			return fmt.Errorf("replica %s: answer not read: the reads of replicas in progress hold the whole answer budget (%d bytes); refused after %d bytes", r.Replica, AnswerBudgetBytes, body.n)
		}
		return fmt.Errorf("replica %s: decode answer: %w", r.Replica, err)
	}
	return nil
}

// decode decodes the answer into out. A backend-status list is decoded one
// element at a time: json.Decoder buffers a whole value before decoding
// it, so decoding the list as one value would hold its encoding and its
// decoding at once.
func decode(dec *json.Decoder, out any) error {
	list, ok := out.(*[]provider.BackendStatus)
	if !ok {
		return dec.Decode(out)
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		*list = nil
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return fmt.Errorf("backend statuses: want a JSON list, got %v", tok)
	}
	*list = []provider.BackendStatus{}
	for dec.More() {
		var s provider.BackendStatus
		if err := dec.Decode(&s); err != nil {
			return err
		}
		*list = append(*list, s)
	}
	_, err = dec.Token()
	return err
}

// answerBudget holds the answer bytes being read from replicas by this
// process (AnswerBudgetBytes).
var answerBudget = semaphore.NewWeighted(AnswerBudgetBytes)

// boundedBody reads at most max bytes of an answer, each taken from sem
// before it is read, all given back by release.
type boundedBody struct {
	r    io.Reader
	ctx  context.Context
	sem  *semaphore.Weighted
	max  int64
	n    int64
	held int64
	// over: the answer passed max; exhausted: the process' budget ran out
	// while this answer held part of it.
	over, exhausted bool
}

// errAnswerTooLarge ends the decoding of an answer past the cap.
var errAnswerTooLarge = errors.New("answer too large")

// errAnswerBudget ends the decoding of an answer when the process' answer
// budget is exhausted.
var errAnswerBudget = errors.New("answer budget exhausted")

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.n >= b.max {
		// One byte more tells an answer of exactly max bytes from a larger
		// one.
		var one [1]byte
		if n, _ := b.r.Read(one[:]); n > 0 {
			b.over = true
			return 0, errAnswerTooLarge
		}
		return b.r.Read(p)
	}
	// Chunks of at most 64 KiB: a read never asks the budget for much more
	// than it will read.
	want := min(int64(len(p)), b.max-b.n, 64<<10)
	if b.held == 0 {
		// Holding nothing, a read may wait for room (within its deadline):
		// no read waits while it holds budget, so reads never wait on each
		// other in a circle.
		if err := b.sem.Acquire(b.ctx, want); err != nil {
			return 0, fmt.Errorf("waiting for answer budget (%d bytes, held by other reads of replicas): %w", AnswerBudgetBytes, err)
		}
	} else if !b.sem.TryAcquire(want) {
		b.exhausted = true
		return 0, errAnswerBudget
	}
	n, err := b.r.Read(p[:want])
	b.sem.Release(want - int64(n))
	b.held += int64(n)
	b.n += int64(n)
	return n, err
}

// release gives back the budget the answer held.
func (b *boundedBody) release() {
	if b.held > 0 {
		b.sem.Release(b.held)
		b.held = 0
	}
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
