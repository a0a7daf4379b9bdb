package awsdp

import (
	"context"
	"crypto/tls"
	"fmt"

	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
)

// Health checks: one goroutine per probe key (address, protocol, path),
// dialing from the load-balancer namespace, each result recorded in
// Probes with the emulator's time it was sent at. The emulator runs its
// checks on its own schedule and asks Probes.Check for each; the answer
// is the last result measured by then, so the emulator's state follows
// the targets as they really answer.

// Probes holds the health check results the data plane measured, and
// answers the emulator's checks from them. Make it before the emulator
// (its Options.Probe is Check) and give it to the data plane.
type Probes struct {
	now func() time.Time

	mu      sync.Mutex
	results map[probeKey][]stamped
}

type stamped struct {
	at  time.Time
	res awsapi.CheckResult
}

// maxResults bounds the results kept per key: the emulator reads its
// checks within a poll of their time, so only the last few are asked for.
const maxResults = 128

// NewProbes returns an empty record whose results are stamped with now,
// the emulator's clock (nil: time.Now).
func NewProbes(now func() time.Time) *Probes {
	if now == nil {
		now = time.Now
	}
	return &Probes{now: now, results: map[probeKey][]stamped{}}
}

// Check answers the emulator's health check scheduled at `at` with the
// result of the last probe of that address, port, protocol and path sent
// at or before it; a failure when there is none (nothing probed yet: as a
// check that timed out). It takes no emulator lock: the emulator calls it
// holding its own.
func (p *Probes) Check(req awsapi.ProbeRequest, at time.Time) awsapi.CheckResult {
	k, ok := keyOf(req)
	if !ok {
		return awsapi.CheckResult{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	rs := p.results[k]
	for i := len(rs) - 1; i >= 0; i-- {
		if !rs[i].at.After(at) {
			return rs[i].res
		}
	}
	return awsapi.CheckResult{}
}

// record keeps a result sent at `at`, in order of sending.
func (p *Probes) record(k probeKey, at time.Time, res awsapi.CheckResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rs := p.results[k]
	i := len(rs)
	for i > 0 && rs[i-1].at.After(at) {
		i--
	}
	rs = append(rs[:i], append([]stamped{{at, res}}, rs[i:]...)...)
	if len(rs) > maxResults {
		rs = rs[len(rs)-maxResults:]
	}
	p.results[k] = rs
}

// forget drops a key's results (no group checks it any more).
func (p *Probes) forget(k probeKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.results, k)
}

// samplesPerInterval is how many probes a key gets per health check
// interval. The emulator's checks run on its own schedule, and each is
// answered by the last probe sent by then: probed once per interval, a
// check would see the target as it was up to a whole interval earlier,
// and a target's failure would reach its state later than on AWS, whose
// check sees the target as it is. Five bound that to a fifth of it.
const samplesPerInterval = 5

// prober probes one key until its context ends.
type prober struct {
	spec   probeSpec
	cancel context.CancelFunc
	done   chan struct{}
}

// runProber probes k at once and then samplesPerInterval times an
// interval, one probe at a time.
func (d *DataPlane) runProber(ctx context.Context, k probeKey, spec probeSpec, done chan struct{}) {
	defer close(done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		start := time.Now()
		at := d.cfg.Probes.now()
		res, detail := d.probeOnce(ctx, k, spec)
		if ctx.Err() != nil {
			return
		}
		d.cfg.Probes.record(k, at, res)
		if verdict := fmt.Sprintf("ok=%t", res.OK); verdict != last {
			d.logf("awsdp: health check %s %s%s: %s (%s)", k.Protocol, k.Addr, k.Path, verdict, detail)
			last = verdict
		}
		timer.Reset(max(0, spec.Interval/samplesPerInterval-time.Since(start)))
	}
}

// probeOnce runs one check: a TCP connect, or an HTTP(S) GET whose status
// must be in the matcher.
func (d *DataPlane) probeOnce(ctx context.Context, k probeKey, spec probeSpec) (awsapi.CheckResult, string) {
	ctx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()
	hostPort := k.Addr.String()
	if k.Protocol == "TCP" {
		conn, err := d.ns.DialContext(ctx, "tcp", hostPort)
		if err != nil {
			return awsapi.CheckResult{}, "tcp: " + err.Error()
		}
		conn.Close()
		return awsapi.CheckResult{OK: true}, "tcp: connected"
	}
	scheme := strings.ToLower(k.Protocol)
	tr := &http.Transport{
		DialContext:       d.ns.DialContext,
		DisableKeepAlives: true,
		Proxy:             nil,
		// An NLB's HTTPS check does not verify the target's certificate.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as the NLB's check
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+hostPort+k.Path, nil)
	if err != nil {
		return awsapi.CheckResult{}, err.Error()
	}
	resp, err := (&http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		return awsapi.CheckResult{}, scheme + ": " + err.Error()
	}
	resp.Body.Close()
	return awsapi.CheckResult{OK: matches(spec.Matcher, resp.StatusCode), HTTPCode: resp.StatusCode}, fmt.Sprintf("%s: status %d", scheme, resp.StatusCode)
}

// matches reports whether code is in an HttpCode matcher: codes and
// ranges separated by commas ("200", "200,202", "200-399"; the default
// for an NLB's HTTP check is 200-399).
func matches(matcher string, code int) bool {
	if matcher == "" {
		matcher = "200-399"
	}
	for _, part := range strings.Split(matcher, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		l, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		h := l
		if isRange {
			if h, err = strconv.Atoi(hi); err != nil {
				continue
			}
		}
		if code >= l && code <= h {
			return true
		}
	}
	return false
}

// syncProbers starts a prober for each new key, restarts one whose spec
// changed and stops those gone (forgetting their results). Called from the
// program loop only.
func (d *DataPlane) syncProbers(want map[probeKey]probeSpec) {
	if d.cfg.Probes == nil {
		return
	}
	for k, p := range d.probers {
		if spec, ok := want[k]; !ok || spec != p.spec {
			p.cancel()
			<-p.done
			delete(d.probers, k)
			if !ok {
				d.cfg.Probes.forget(k)
			}
		}
	}
	for k, spec := range want {
		if _, ok := d.probers[k]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(d.ctx)
		p := &prober{spec: spec, cancel: cancel, done: make(chan struct{})}
		d.probers[k] = p
		go d.runProber(ctx, k, spec, p.done)
	}
}

// stopProbers stops every prober and waits for it.
func (d *DataPlane) stopProbers() {
	for k, p := range d.probers {
		p.cancel()
		<-p.done
		delete(d.probers, k)
	}
}
