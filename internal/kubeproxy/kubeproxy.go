// Package kubeproxy reads kube-proxy's /healthz (its --healthz-bind-address,
// port 10256 by default) to learn when a node's kube-proxy last synced its
// rules. The termination gate uses it in node mode: a load balancer that
// sends to node IP:nodePort reaches a pod through kube-proxy, so a
// terminating pod is safe from new connections only once kube-proxy has
// programmed the change.
//
// There is no exact signal. Since Kubernetes 1.31 /healthz reports, per IP
// family, when the proxier last finished a sync (status.<family>.lastUpdated;
// the top-level lastUpdated is the current time when healthy). A sync that
// ended after the change plus a margin (informer delay, clock skew between
// the node and the API server) most likely carried it. Periodic syncs move
// the time too, and it is the node's clock: this is a heuristic, documented
// as one.
package kubeproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Health is the part of kube-proxy's /healthz answer the gate reads.
type Health struct {
	// LastUpdated is, in releases before 1.31, the last sync; since, the
	// current time when healthy.
	LastUpdated time.Time `json:"lastUpdated"`
	CurrentTime time.Time `json:"currentTime"`
	// Status is per IP family ("IPv4", "IPv6") since 1.31.
	Status map[string]struct {
		LastUpdated time.Time `json:"lastUpdated"`
		Healthy     bool      `json:"healthy"`
	} `json:"status"`
}

// LastSync is when the proxier of family last finished a sync; ok is false
// when the answer says nothing of that family.
func (h Health) LastSync(family string) (time.Time, bool) {
	if len(h.Status) == 0 {
		// Before 1.31 the top-level time was the last sync of the only proxier.
		return h.LastUpdated, !h.LastUpdated.IsZero()
	}
	s, ok := h.Status[family]
	if !ok || s.LastUpdated.IsZero() {
		return time.Time{}, false
	}
	return s.LastUpdated, true
}

// Client reads /healthz of the nodes' kube-proxies.
type Client struct {
	Port int32
	// HTTP is the client used (default: one with a 1 s timeout; a stopped
	// kube-proxy accepts connections in the kernel and never answers).
	HTTP *http.Client
}

// Read returns the /healthz answer of the kube-proxy on nodeAddr. kube-proxy
// answers 503 when it is unhealthy or the node is going away; the body is
// read all the same, it carries the times.
func (c *Client) Read(ctx context.Context, nodeAddr string) (Health, error) {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: time.Second}
	}
	url := "http://" + net.JoinHostPort(nodeAddr, strconv.Itoa(int(c.Port))) + "/healthz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Health{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Health{}, fmt.Errorf("kube-proxy healthz of %s: %w", nodeAddr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return Health{}, fmt.Errorf("kube-proxy healthz of %s: %w", nodeAddr, err)
	}
	var h Health
	if err := json.Unmarshal(body, &h); err != nil {
		return Health{}, fmt.Errorf("kube-proxy healthz of %s: status %d, body not kube-proxy's: %w", nodeAddr, resp.StatusCode, err)
	}
	return h, nil
}

// SyncedAfter reports whether the kube-proxy on nodeAddr finished a sync of
// family after t.
func (c *Client) SyncedAfter(ctx context.Context, nodeAddr, family string, t time.Time) (bool, error) {
	h, err := c.Read(ctx, nodeAddr)
	if err != nil {
		return false, err
	}
	last, ok := h.LastSync(family)
	if !ok {
		return false, fmt.Errorf("kube-proxy healthz of %s reports no %s sync", nodeAddr, family)
	}
	return last.After(t), nil
}
