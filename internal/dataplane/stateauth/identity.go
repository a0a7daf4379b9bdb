// Package stateauth authenticates the data-plane state endpoint in both
// directions, so that neither side can be stood in for by a process that
// merely reaches or binds the port:
//
//   - a replica proves it is the pod the control role expects with a TLS
//     server certificate that names the pod's UID, whose key never leaves
//     the replica's memory, issued through the Kubernetes CSR API by the
//     control role only to a request made with that very pod's bound
//     ServiceAccount token (Replica, Signer);
//   - the control role proves itself with a TLS client certificate from the
//     same private CA, whose key only the control role can read (Authority).
//
// A replica without a certificate (not yet issued, or the signer down) does
// not answer: the gates read that as no answer and wait, never as
// "drained" or "served".
package stateauth

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// SignerName is the CSR signer of replicas' state endpoint certificates.
const SignerName = "zerodrop.dev/data-plane-state"

// DefaultCASecret names the Secret (in the data-plane namespace) that holds
// the private CA; only the control role may read it.
const DefaultCASecret = "zerodrop-data-plane-ca"

// Lifetimes. A replica's certificate lives a day and is renewed when a
// third of it is left, so a replica whose API server is down keeps serving
// for hours; the CA lives a year and is rotated likewise, with Overlap
// between trusting a new CA and signing with it.
const (
	DefaultLeafValidity = 24 * time.Hour
	DefaultCAValidity   = 365 * 24 * time.Hour
	// DefaultOverlap exceeds a leaf's lifetime: a replica learns the CAs it
	// trusts for clients when its certificate is issued, so by the time the
	// control role signs its client certificate with a new CA every replica
	// has renewed once since that CA was added.
	DefaultOverlap = DefaultLeafValidity + time.Hour
)

const (
	replicaURIPrefix = "urn:zerodrop:data-plane-replica:"
	// ControlURI names the control role in its client certificate.
	ControlURI = "urn:zerodrop:control"
)

// ReplicaURI is the URI SAN of the replica whose pod has uid.
func ReplicaURI(uid types.UID) string { return replicaURIPrefix + string(uid) }

// replicaUID is the pod UID a replica URI names.
func replicaUID(uri string) (types.UID, bool) {
	uid, ok := strings.CutPrefix(uri, replicaURIPrefix)
	return types.UID(uid), ok && uid != ""
}

// verifyPeer checks that chain (leaf first) leads to one of roots for usage
// at now, and that the leaf names exactly wantURI.
func verifyPeer(chain []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage, wantURI string, now time.Time) error {
	if len(chain) == 0 {
		return errors.New("no certificate")
	}
	if roots == nil {
		return errors.New("no trusted CA yet")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	leaf := chain[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return fmt.Errorf("certificate not trusted: %w", err)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != wantURI {
		var got []string
		for _, u := range leaf.URIs {
			got = append(got, u.String())
		}
		return fmt.Errorf("certificate names %v, want %s", got, wantURI)
	}
	return nil
}
