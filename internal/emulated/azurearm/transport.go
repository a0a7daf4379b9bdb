package azurearm

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
)

// inMemory serves a client's requests with ServeHTTP, without a
// connection: ClientOptions' transport.
type inMemory struct{ e *Emulator }

func (m inMemory) Do(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
	}
	rep := m.e.serve(req, body)
	if rep.err != nil {
		return nil, rep.err
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", rep.status, http.StatusText(rep.status)), StatusCode: rep.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: rep.header,
		Body: io.NopCloser(bytes.NewReader(rep.body)), ContentLength: int64(len(rep.body)), Request: req,
	}, nil
}

// reqInfo is what a write's handling learns about its request.
type reqInfo struct {
	subscription         string
	ifMatch, ifNoneMatch string
	slow                 bool
}

type faultKind int

const (
	noFault faultKind = iota
	faultConflict
	faultThrottle
	faultServerError
	faultSlow
)

func (e *Emulator) count(method string, pool bool, size int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if method == http.MethodPut && size > 0 {
		e.counters.PutBytes += size
	}
	switch {
	case method == http.MethodGet:
		e.counters.Gets++
	case method == http.MethodPut && pool:
		e.counters.PoolPuts++
	case method == http.MethodPut:
		e.counters.LBPuts++
	case method == http.MethodDelete:
		e.counters.Deletes++
	}
}

func (e *Emulator) faultsNow() Faults {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.faults
}

// decideFault draws whether this request fails, and how, from the seeded
// generator; after a fault the load balancer has Cooldown clean requests.
func (e *Emulator) decideFault(key string, write bool) faultKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	f := e.faults
	if f.Rate <= 0 {
		return noFault
	}
	if e.cooldown[key] > 0 {
		e.cooldown[key]--
		return noFault
	}
	if e.rng.Float64() >= f.Rate {
		return noFault
	}
	conflict := f.Conflict
	if !write {
		conflict = 0
	}
	total := conflict + f.Throttle + f.ServerError + f.Slow
	if total <= 0 {
		return noFault
	}
	e.cooldown[key] = f.Cooldown
	x := e.rng.Float64() * total
	switch {
	case x < conflict:
		return faultConflict
	case x < conflict+f.Throttle:
		e.counters.Throttled++
		return faultThrottle
	case x < conflict+f.Throttle+f.ServerError:
		e.counters.ServerErrors++
		return faultServerError
	default:
		e.counters.Slow++
		return faultSlow
	}
}
