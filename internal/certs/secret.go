package certs

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Keys of the Secret's data. tls.crt and tls.key make it a valid
// kubernetes.io/tls Secret, so the usual tools can read it.
const (
	KeyServingCert = corev1.TLSCertKey       // tls.crt
	KeyServingKey  = corev1.TLSPrivateKeyKey // tls.key
	KeyCACert      = "ca.crt"
	KeyCAKey       = "ca.key"
	KeyBundle      = "ca-bundle.crt"
	// AnnotationSince records State.Since (RFC 3339).
	AnnotationSince = "zerodrop.dev/rotation-step-at"
)

// errNoState is returned by decode for a Secret that holds nothing yet.
var errNoState = errors.New("secret holds no certificates")

// decode reads the state from a Secret. An unusable part (a corrupt key, a
// missing bundle) is reported as an error; Step then repairs or replaces it.
func decode(s *corev1.Secret) (State, error) {
	if s == nil || len(s.Data) == 0 {
		return State{}, errNoState
	}
	var st State
	var errs []error
	ca, err := ParseKeyPair(s.Data[KeyCACert], s.Data[KeyCAKey])
	if err != nil {
		errs = append(errs, fmt.Errorf("CA: %w", err))
	} else {
		st.CA = ca
	}
	serving, err := ParseKeyPair(s.Data[KeyServingCert], s.Data[KeyServingKey])
	if err != nil {
		errs = append(errs, fmt.Errorf("serving certificate: %w", err))
	} else {
		st.Serving = serving
	}
	trusted, err := ParseCertificates(s.Data[KeyBundle])
	if err != nil {
		errs = append(errs, fmt.Errorf("CA bundle: %w", err))
	} else {
		st.Trusted = trusted
	}
	if v, ok := s.Annotations[AnnotationSince]; ok {
		if st.Since, err = time.Parse(time.RFC3339, v); err != nil {
			errs = append(errs, fmt.Errorf("annotation %s: %w", AnnotationSince, err))
		}
	}
	return st, errors.Join(errs...)
}

// encode writes the state into s (data, annotation, and the type of a new
// Secret: the type of an existing one is immutable).
func encode(st State, s *corev1.Secret) {
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[AnnotationSince] = st.Since.UTC().Format(time.RFC3339)
	if s.Type == "" {
		s.Type = corev1.SecretTypeTLS
	}
	s.Data = map[string][]byte{
		KeyServingCert: st.Serving.CertPEM,
		KeyServingKey:  st.Serving.KeyPEM,
		KeyCACert:      st.CA.CertPEM,
		KeyCAKey:       st.CA.KeyPEM,
		KeyBundle:      st.Bundle(),
	}
}
