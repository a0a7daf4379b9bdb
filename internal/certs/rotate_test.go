package certs

import (
	"crypto/x509"
	"testing"
	"time"
)

var (
	t0     = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	policy = Policy{
		Hosts:           []string{"zerodrop-webhook.zerodrop-system.svc", "zerodrop-webhook.zerodrop-system.svc.cluster.local"},
		CAValidity:      time.Hour,
		ServingValidity: 30 * time.Minute,
		Overlap:         2 * time.Minute,
	}
)

// verifies reports whether serving chains to one of the trusted CAs for the
// first host at now, the way the API server checks the webhook.
func verifies(t *testing.T, serving *KeyPair, trusted []*x509.Certificate, now time.Time) error {
	t.Helper()
	pool := x509.NewCertPool()
	for _, c := range trusted {
		pool.AddCert(c)
	}
	_, err := serving.Cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: policy.Hosts[0], CurrentTime: now})
	return err
}

func mustStep(t *testing.T, st State, now time.Time, published bool, want Change) State {
	t.Helper()
	next, got, err := Step(st, policy, now, published)
	if err != nil {
		t.Fatalf("Step at %s: %v", now.Sub(t0), err)
	}
	if got != want {
		t.Fatalf("Step at %s: change %q, want %q", now.Sub(t0), got, want)
	}
	if want == Unchanged && (next.CA != st.CA || next.Serving != st.Serving || len(next.Trusted) != len(st.Trusted)) {
		t.Fatalf("Step at %s: Unchanged but the state differs", now.Sub(t0))
	}
	if err := verifies(t, next.Serving, next.Trusted, now); err != nil {
		t.Fatalf("after %q at %s the serving certificate does not verify against the bundle: %v", got, now.Sub(t0), err)
	}
	return next
}

func TestStepIssuesFromNothing(t *testing.T) {
	st := mustStep(t, State{}, t0, true, Issued)
	if !st.CA.Cert.IsCA || len(st.Trusted) != 1 || !st.Trusted[0].Equal(st.CA.Cert) {
		t.Fatalf("want one trusted CA that signs, got %d trusted", len(st.Trusted))
	}
	if st.Serving.Cert.NotAfter.After(st.CA.Cert.NotAfter) {
		t.Fatalf("serving certificate outlives its CA")
	}
	if !coversHosts(st.Serving.Cert, policy.Hosts) {
		t.Fatalf("serving certificate names %v, want %v", st.Serving.Cert.DNSNames, policy.Hosts)
	}
	// Nothing is due: no write.
	mustStep(t, st, t0.Add(time.Minute), true, Unchanged)
	mustStep(t, st, t0.Add(time.Minute), false, Unchanged)
}

func TestStepRenewsServing(t *testing.T) {
	st := mustStep(t, State{}, t0, true, Issued)
	for _, tc := range []struct {
		name string
		at   time.Time
		st   func(State) State
	}{
		{"less than a third left", t0.Add(21 * time.Minute), nil},
		{"expired", t0.Add(31 * time.Minute), nil},
		{"missing", t0.Add(time.Minute), func(s State) State { s.Serving = nil; return s }},
		{"hosts changed", t0.Add(time.Minute), func(s State) State {
			other, err := NewServing(s.CA, []string{"old.zerodrop-system.svc"}, t0, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			s.Serving = other
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := st
			if tc.st != nil {
				in = tc.st(in)
			}
			next := mustStep(t, in, tc.at, true, ServingRenewed)
			if next.CA != st.CA || len(next.Trusted) != 1 {
				t.Fatalf("renewing the serving certificate must keep the CA")
			}
			if !signedBy(next.Serving.Cert, st.CA.Cert) {
				t.Fatalf("new serving certificate not signed by the CA")
			}
		})
	}
	// Just before the third: nothing.
	mustStep(t, st, t0.Add(19*time.Minute), true, Unchanged)
}

// TestStepRotatesCAWithOverlap walks a CA rotation: at every step the
// serving certificate verifies against the bundle the API server had
// before the step and the one it has after it.
func TestStepRotatesCAWithOverlap(t *testing.T) {
	old := mustStep(t, State{}, t0, true, Issued)
	// Keep the serving certificate fresh until the CA is due.
	now := t0.Add(41 * time.Minute)
	st := old
	st.Serving = mustIssue(t, old.CA, now.Add(-time.Minute))

	st = mustStep(t, st, now, true, CATrusted)
	if len(st.Trusted) != 2 || !st.Trusted[0].Equal(old.CA.Cert) || !st.Trusted[1].Equal(st.CA.Cert) {
		t.Fatalf("during CA rotation want [old, new] trusted, got %d", len(st.Trusted))
	}
	if st.CA == old.CA {
		t.Fatalf("CA not replaced")
	}
	if signedBy(st.Serving.Cert, st.CA.Cert) {
		t.Fatalf("serving certificate moved to the new CA before the bundle was published")
	}

	// Not published yet, or published but within the overlap: wait.
	mustStep(t, st, now.Add(10*time.Minute), false, Unchanged)
	mustStep(t, st, now.Add(time.Minute), true, Unchanged)

	bundleBefore := st.Trusted
	now = now.Add(2 * time.Minute)
	st = mustStep(t, st, now, true, ServingRenewed)
	if !signedBy(st.Serving.Cert, st.CA.Cert) || len(st.Trusted) != 2 {
		t.Fatalf("want serving from the new CA with both CAs still trusted")
	}
	if err := verifies(t, st.Serving, bundleBefore, now); err != nil {
		t.Fatalf("new serving certificate does not verify against the bundle published before it: %v", err)
	}
	// Replicas still serving the old certificate are trusted too.
	mustStep(t, st, now.Add(time.Minute), true, Unchanged)

	now = now.Add(2 * time.Minute)
	st = mustStep(t, st, now, true, OldCADropped)
	if len(st.Trusted) != 1 || !st.Trusted[0].Equal(st.CA.Cert) {
		t.Fatalf("want only the new CA trusted")
	}
	mustStep(t, st, now.Add(time.Minute), true, Unchanged)
}

func mustIssue(t *testing.T, ca *KeyPair, at time.Time) *KeyPair {
	t.Helper()
	kp, err := NewServing(ca, policy.Hosts, at, policy.ServingValidity)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func TestStepServingExpiresDuringOverlap(t *testing.T) {
	st := mustStep(t, State{}, t0, true, Issued)
	// A serving certificate that expires at 42 min, a minute into the
	// rotation's overlap.
	st.Serving = mustIssue(t, st.CA, t0.Add(12*time.Minute))
	now := t0.Add(41 * time.Minute)
	st = mustStep(t, st, now, true, CATrusted)
	// It has expired: replace it at once, though the overlap has not passed
	// and the new bundle is not even published.
	st = mustStep(t, st, now.Add(90*time.Second), false, ServingRenewed)
	if !signedBy(st.Serving.Cert, st.CA.Cert) {
		t.Fatalf("want the replacement from the new CA")
	}
}

func TestStepExpiredCAStartsOver(t *testing.T) {
	st := mustStep(t, State{}, t0, true, Issued)
	next := mustStep(t, st, t0.Add(2*time.Hour), true, Issued)
	if next.CA.Cert.Equal(st.CA.Cert) {
		t.Fatalf("want a new CA")
	}
}

func TestStepRepairsBundle(t *testing.T) {
	st := mustStep(t, State{}, t0, true, Issued)
	expired, err := NewCA("expired", t0.Add(-2*time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	in := st
	in.Trusted = []*x509.Certificate{expired.Cert, st.CA.Cert}
	if got := mustStep(t, in, t0.Add(time.Minute), true, BundleRepaired); len(got.Trusted) != 1 {
		t.Fatalf("expired CA kept in the bundle")
	}
	in.Trusted = nil
	if got := mustStep(t, in, t0.Add(time.Minute), true, BundleRepaired); len(got.Trusted) != 1 {
		t.Fatalf("signing CA not added to an empty bundle")
	}
}

// TestStepLongRun simulates two CA lifetimes with the production ratios
// scaled down (days become hours): every tick each due step is applied and
// published as Sync does; the current serving certificate, and for the
// overlap the previous one (a replica that has not re-read the Secret yet),
// must verify against the published bundle at all times.
func TestStepLongRun(t *testing.T) {
	p := Policy{Hosts: policy.Hosts, CAValidity: 365 * time.Hour, ServingValidity: 90 * time.Hour, Overlap: 12 * time.Minute}
	tick := 5 * time.Minute
	var st State
	var published []*x509.Certificate
	var prevServing *KeyPair
	var changedAt time.Time
	cas, servings := 0, 0
	for now := t0; now.Before(t0.Add(2 * 365 * time.Hour)); now = now.Add(tick) {
		for range 4 {
			next, change, err := Step(st, p, now, true)
			if err != nil {
				t.Fatal(err)
			}
			if change == Unchanged {
				break
			}
			if st.Serving != next.Serving {
				prevServing, changedAt, servings = st.Serving, now, servings+1
			}
			if st.CA != next.CA {
				cas++
			}
			st, published = next, next.Trusted
		}
		served := []*KeyPair{st.Serving}
		if prevServing != nil && now.Sub(changedAt) < p.Overlap && valid(prevServing.Cert, now) {
			served = append(served, prevServing)
		}
		for _, s := range served {
			if err := verifies(t, s, published, now); err != nil {
				t.Fatalf("at %s: a served certificate does not verify against the published bundle: %v", now.Sub(t0), err)
			}
		}
	}
	if cas < 3 || servings < 10 {
		t.Fatalf("want several rotations in two CA lifetimes, got %d CAs and %d serving certificates", cas, servings)
	}
}

func TestPolicyValidate(t *testing.T) {
	for name, p := range map[string]Policy{
		"no hosts":          {CAValidity: time.Hour, ServingValidity: time.Minute},
		"zero validity":     {Hosts: []string{"a"}, CAValidity: time.Hour},
		"serving beyond CA": {Hosts: []string{"a"}, CAValidity: time.Hour, ServingValidity: 2 * time.Hour},
		"negative overlap":  {Hosts: []string{"a"}, CAValidity: time.Hour, ServingValidity: time.Hour, Overlap: -1},
	} {
		if p.Validate() == nil {
			t.Errorf("%s: want an error", name)
		}
	}
	if err := policy.Validate(); err != nil {
		t.Errorf("test policy: %v", err)
	}
}
