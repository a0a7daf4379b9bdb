package emulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
)

// The emulator over HTTP, for controllers in processes of their own (the
// lab SIGKILLs them): Handler serves it, Remote routes a client to it. A
// request keeps the ARM host it was made for in its Host header, so the
// fake servers, and the poll URLs they hand out, see the same URLs as an
// in-process client; nothing is ever sent to that host. The API name the
// SDK's client puts in a request's context, by which the fake servers
// dispatch, travels in apiHeader.

// The URL of the request a response answers (the emulator tags a write's
// with its operation) travels back in urlHeader.
const (
	apiHeader = "X-Zerodrop-Emulator-Api"
	urlHeader = "X-Zerodrop-Emulator-Url"
)

// Handler serves the emulator's API as ClientOptions does in process:
// counting, faults and OnWrite included.
func (e *Emulator) Handler() http.Handler {
	t := e.newTransport()
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPut || req.Method == http.MethodDelete {
			e.writesInFlight.Add(1)
			defer e.writesInFlight.Add(-1)
		}
		req.URL.Scheme, req.URL.Host, req.RequestURI = "https", req.Host, ""
		if api := req.Header.Get(apiHeader); api != "" {
			req = req.WithContext(context.WithValue(req.Context(), runtime.CtxAPINameKey{}, api))
		}
		resp, err := t.Do(req)
		var re *azcore.ResponseError
		if errors.As(err, &re) && re.RawResponse != nil {
			// A fake server's error answer (a 404, say): send it as ARM would.
			resp, err = re.RawResponse, nil
		}
		if err != nil {
			http.Error(w, "emulator: "+err.Error(), http.StatusBadGateway)
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		if resp.Request != nil {
			w.Header().Set(urlHeader, resp.Request.URL.String())
		}
		w.WriteHeader(resp.StatusCode)
		if resp.Body != nil {
			defer resp.Body.Close()
			_, _ = io.Copy(w, resp.Body)
		}
	})
}

// WritesInFlight is how many PUTs and DELETEs Handler has received and not
// yet answered: once a writer process is dead and this is 0, every write it
// sent has landed or failed.
func (e *Emulator) WritesInFlight() int64 { return e.writesInFlight.Load() }

// Remote returns a credential and client options that send an armnetwork
// client's requests to the emulator Handler serves at baseURL (plain HTTP on
// loopback), with the same SDK retry timing as ClientOptions.
func Remote(baseURL string) (azcore.TokenCredential, *arm.ClientOptions, error) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, nil, fmt.Errorf("emulator URL %q: want http://HOST:PORT", baseURL)
	}
	t := &remote{base: u, client: &http.Client{Transport: &http.Transport{Proxy: nil}}}
	return &azfake.TokenCredential{}, &arm.ClientOptions{
		ClientOptions:         policy.ClientOptions{Transport: t, Retry: sdkRetry},
		DisableRPRegistration: true,
	}, nil
}

// remote sends a request to the emulator's address, its ARM host kept in
// the Host header.
type remote struct {
	base   *url.URL
	client *http.Client
}

func (r *remote) Do(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	u := *req.URL
	u.Scheme, u.Host = r.base.Scheme, r.base.Host
	out.URL, out.Host = &u, req.URL.Host
	if api, ok := req.Context().Value(runtime.CtxAPINameKey{}).(string); ok {
		out.Header.Set(apiHeader, api)
	}
	resp, err := r.client.Do(out)
	if err != nil {
		return nil, err
	}
	// The SDK's fake poller builds its poll URL from the request a response
	// answers: the ARM one the emulator saw, not the emulator's address.
	resp.Request = req
	if raw := resp.Header.Get(urlHeader); raw != "" {
		answered, err := url.Parse(raw)
		if err != nil {
			resp.Body.Close()
			return nil, fmt.Errorf("emulator: answered URL %q: %w", raw, err)
		}
		resp.Request = req.Clone(req.Context())
		resp.Request.URL = answered
	}
	return resp, nil
}
