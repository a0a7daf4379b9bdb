package azuredp

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// Probes: one goroutine per (probe, backend address), started at a random
// phase within the interval so that backends are not probed in step (Azure
// probes from a distributed service on each host), dialing from the
// load-balancer namespace.

// health is one target's probe state.
type health struct {
	up bool
	// everUp: a target that was never Up goes Up on its first success
	// ("the health probe is successful once after the VM boots",
	// load-balancer-custom-probe-overview); one marked down needs
	// threshold successes in a row (probeThreshold).
	everUp     bool
	succ, fail int
	last       string // the last probe's result, for the rule-health reason
}

// observe applies one probe result and reports whether up changed.
func (h *health) observe(ok bool, detail string, threshold int) bool {
	h.last = detail
	if ok {
		h.fail = 0
		h.succ++
		if !h.up && (!h.everUp || h.succ >= threshold) {
			h.up, h.everUp = true, true
			return true
		}
		return false
	}
	h.succ = 0
	h.fail++
	if h.up && h.fail >= threshold {
		h.up = false
		return true
	}
	return false
}

// prober probes one target until its context ends.
type prober struct {
	t      target
	spec   probeSpec
	cancel context.CancelFunc
	done   chan struct{}
}

// runProber probes t with spec every interval, reporting each result.
func (d *DataPlane) runProber(ctx context.Context, p *prober) {
	defer close(p.done)
	phase := time.Duration(rand.Int64N(int64(p.spec.Interval)))
	timer := time.NewTimer(phase)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		start := time.Now()
		ok, detail := d.probeOnce(ctx, p.t.addr, p.spec)
		if ctx.Err() != nil {
			return
		}
		d.report(p.t, p.spec, ok, detail)
		timer.Reset(max(0, p.spec.Interval-time.Since(start)))
	}
}

// probeOnce sends one probe: a TCP handshake, or an HTTP(S) GET that must
// answer 200. A TCP probe succeeds once the handshake completes (the REST
// spec: "a received ACK is required").
func (d *DataPlane) probeOnce(ctx context.Context, addr netip.Addr, spec probeSpec) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, spec.timeout())
	defer cancel()
	hostPort := net.JoinHostPort(addr.String(), strconv.Itoa(int(spec.Port)))
	if spec.Protocol == armnetwork.ProbeProtocolTCP {
		conn, err := d.ns.DialContext(ctx, "tcp", hostPort)
		if err != nil {
			return false, "tcp: " + err.Error()
		}
		conn.Close()
		return true, "tcp: connected"
	}
	scheme := "http"
	if spec.Protocol == armnetwork.ProbeProtocolHTTPS {
		scheme = "https"
	}
	tr := &http.Transport{
		DialContext:       d.ns.DialContext,
		DisableKeepAlives: true,
		Proxy:             nil,
		// Azure's HTTPS probe checks the answer, not the certificate.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as Azure's probe
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+hostPort+spec.Path, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return false, scheme + ": " + err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Sprintf("%s: status %d", scheme, resp.StatusCode)
	}
	return true, scheme + ": status 200"
}

// report records a probe result; a change of Up/Down re-programs the rules.
func (d *DataPlane) report(t target, spec probeSpec, ok bool, detail string) {
	d.mu.Lock()
	h, known := d.health[t]
	if !known {
		d.mu.Unlock()
		return // the target left the model while this probe ran
	}
	changed := h.observe(ok, detail, spec.Threshold)
	up := h.up
	d.mu.Unlock()
	if changed {
		d.logf("azuredp: probe %s/%s %s: up=%t (%s)", t.probe.lb, t.probe.probe, t.addr, up, detail)
		wake(d.kicked) // the loop re-programs
	}
}

// syncProbers starts a prober for each new target, restarts one whose
// probe changed (keeping its state) and stops those gone. Called from the
// program loop only.
func (d *DataPlane) syncProbers(want map[target]probeSpec) {
	for t, p := range d.probers {
		if spec, ok := want[t]; !ok || spec != p.spec {
			p.cancel()
			<-p.done
			delete(d.probers, t)
			if !ok {
				d.mu.Lock()
				delete(d.health, t)
				d.mu.Unlock()
			}
		}
	}
	for t, spec := range want {
		if _, ok := d.probers[t]; ok {
			continue
		}
		d.mu.Lock()
		if _, ok := d.health[t]; !ok {
			d.health[t] = &health{last: "not probed yet"}
		}
		d.mu.Unlock()
		ctx, cancel := context.WithCancel(d.ctx)
		p := &prober{t: t, spec: spec, cancel: cancel, done: make(chan struct{})}
		d.probers[t] = p
		go d.runProber(ctx, p)
	}
}

// stopProbers stops every prober and waits for it.
func (d *DataPlane) stopProbers() {
	for t, p := range d.probers {
		p.cancel()
		<-p.done
		delete(d.probers, t)
	}
}
