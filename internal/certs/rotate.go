package certs

import (
	"crypto/x509"
	"fmt"
	"slices"
	"time"
)

// State is what the Secret holds: the CA that signs, the serving certificate,
// the CAs the API server is told to trust (the caBundle) and when the last
// rotation step happened.
type State struct {
	CA      *KeyPair
	Serving *KeyPair
	// Trusted is the caBundle, oldest first. It holds more than the signing
	// CA only during a CA rotation.
	Trusted []*x509.Certificate
	// Since is when the last rotation step (a CA added to or dropped from
	// Trusted, or the serving certificate moved to a new CA) was taken.
	Since time.Time
}

// Bundle is the PEM caBundle of the state.
func (s State) Bundle() []byte { return EncodeCertificates(s.Trusted) }

// Policy says what to issue and when to rotate.
type Policy struct {
	// Hosts the serving certificate names (DNS names or IP addresses).
	Hosts []string
	// CAValidity and ServingValidity are the lifetimes of new certificates.
	CAValidity      time.Duration
	ServingValidity time.Duration
	// Overlap is how long a new CA is trusted before anything it signs is
	// served, and how long an old CA stays trusted after the serving
	// certificate moved to the new one. It must cover the API server's
	// pick-up of a new caBundle and every replica's pick-up of a new
	// serving certificate.
	Overlap time.Duration
}

// Change names the step Step took.
type Change string

// The rotation steps.
const (
	// Unchanged: nothing to do (or waiting for the overlap to pass).
	Unchanged Change = ""
	// Issued: a new CA and serving certificate, from nothing (first start,
	// or the stored CA was unusable or expired).
	Issued Change = "Issued"
	// CATrusted: the CA is due for renewal; a new CA signs from now on and is
	// added to the trusted bundle. The serving certificate stays as it is.
	CATrusted Change = "CATrusted"
	// ServingRenewed: a new serving certificate from the signing CA.
	ServingRenewed Change = "ServingRenewed"
	// OldCADropped: the serving certificate has been signed by the new CA
	// for the overlap; the old CA leaves the bundle.
	OldCADropped Change = "OldCADropped"
	// BundleRepaired: expired CAs left the bundle, or the signing CA was
	// missing from it.
	BundleRepaired Change = "BundleRepaired"
)

// renewDue reports whether less than a third of cert's validity remains.
func renewDue(cert *x509.Certificate, now time.Time) bool {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return !now.Before(cert.NotAfter.Add(-life / 3))
}

// valid reports whether cert is within its validity window at now.
func valid(cert *x509.Certificate, now time.Time) bool {
	return !now.Before(cert.NotBefore) && now.Before(cert.NotAfter)
}

// Step advances the state by one rotation step at now. published says
// whether the API server has been given st's bundle (the webhook
// configuration carries it, or there is no webhook configuration to carry
// it): a serving certificate from a new CA is issued only once the new CA is
// published and the overlap has passed, so that no API server ever meets a
// certificate it does not trust. A certificate that is missing or already
// invalid is replaced at once: waiting cannot make anything better.
//
// Step is pure apart from key generation; st is not modified.
func Step(st State, p Policy, now time.Time, published bool) (State, Change, error) {
	if st.CA == nil || !valid(st.CA.Cert, now) {
		return fresh(p, now)
	}
	next := st
	next.Trusted = slices.DeleteFunc(slices.Clone(st.Trusted), func(c *x509.Certificate) bool {
		return !valid(c, now)
	})
	if !slices.ContainsFunc(next.Trusted, st.CA.Cert.Equal) {
		next.Trusted = append(next.Trusted, st.CA.Cert)
	}
	if !slices.EqualFunc(next.Trusted, st.Trusted, (*x509.Certificate).Equal) {
		return next, BundleRepaired, nil
	}

	// A CA is renewed only when no rotation is under way: during one, the
	// signing CA is the new one and far from due.
	if len(st.Trusted) == 1 && renewDue(st.CA.Cert, now) {
		ca, err := NewCA(caName, now, p.CAValidity)
		if err != nil {
			return st, Unchanged, err
		}
		next.CA = ca
		next.Trusted = append(slices.Clone(st.Trusted), ca.Cert)
		next.Since = now
		return next, CATrusted, nil
	}

	usable := st.Serving != nil && valid(st.Serving.Cert, now)
	fromCA := usable && signedBy(st.Serving.Cert, st.CA.Cert)
	settled := published && !now.Before(st.Since.Add(p.Overlap))
	switch {
	case !usable, !coversHosts(st.Serving.Cert, p.Hosts) && (fromCA || settled),
		fromCA && renewDue(st.Serving.Cert, now),
		!fromCA && settled:
		serving, err := NewServing(st.CA, p.Hosts, now, p.ServingValidity)
		if err != nil {
			return st, Unchanged, err
		}
		next.Serving = serving
		if !fromCA {
			// The overlap for dropping the old CA starts now.
			next.Since = now
		}
		return next, ServingRenewed, nil
	}

	if len(st.Trusted) > 1 && fromCA && settled {
		next.Trusted = []*x509.Certificate{st.CA.Cert}
		next.Since = now
		return next, OldCADropped, nil
	}
	return st, Unchanged, nil
}

// caName is the common name of zerodrop's webhook CA.
const caName = "zerodrop-webhook-ca"

func fresh(p Policy, now time.Time) (State, Change, error) {
	ca, err := NewCA(caName, now, p.CAValidity)
	if err != nil {
		return State{}, Unchanged, err
	}
	serving, err := NewServing(ca, p.Hosts, now, p.ServingValidity)
	if err != nil {
		return State{}, Unchanged, err
	}
	return State{CA: ca, Serving: serving, Trusted: []*x509.Certificate{ca.Cert}, Since: now}, Issued, nil
}

// Validate checks a policy before it is used.
func (p Policy) Validate() error {
	switch {
	case len(p.Hosts) == 0:
		return fmt.Errorf("no hosts for the serving certificate")
	case p.CAValidity <= 0 || p.ServingValidity <= 0:
		return fmt.Errorf("validities must be positive (CA %s, serving %s)", p.CAValidity, p.ServingValidity)
	case p.ServingValidity > p.CAValidity:
		return fmt.Errorf("serving validity %s exceeds the CA validity %s", p.ServingValidity, p.CAValidity)
	case p.Overlap < 0:
		return fmt.Errorf("overlap must not be negative, not %s", p.Overlap)
	}
	return nil
}
