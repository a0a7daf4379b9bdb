package drain

// The drain answer's proof (issue 46, M4): the relay calls the drain
// endpoint at a fixed ClusterIP over plain HTTP, and a tenant who may set a
// Service's spec.externalIPs can capture that address (CVE-2020-8554) and
// answer "drained" for every pod. The relay therefore trusts an answer only
// when it carries a MAC that only the controller can compute:
//
//   - the controller holds a drain key K (a Secret shared by its replicas);
//   - at admission the webhook gives each pod its token T = HMAC(K, pod),
//     in the relay's environment and in the preStop hook's header (the
//     relay also uses it to tell the kubelet's call from another pod's);
//   - the relay sends a fresh nonce with each call, never T; the drain
//     endpoint answers with Proof(T, pod, uid, nonce, status, result).
//
// An impostor sees the pod, the UID and the nonce but not T, so it cannot
// make an answer the relay accepts; it can only forward the real endpoint's
// answer, which says what the real endpoint says.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
)

// ProofHeader carries the answer's proof when the call sent a nonce.
const ProofHeader = "X-Zerodrop-Proof"

// NonceParam is the query parameter of the relay's nonce.
const NonceParam = "nonce"

// MinKeyLen is the shortest drain key accepted (256 bits).
const MinKeyLen = 32

// PodToken is pod's token under the drain key: the webhook injects it,
// the drain endpoint recomputes it from the pod named in the call.
func PodToken(key []byte, namespace, name string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("zerodrop drain token\x00" + namespace + "/" + name))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Proof is the MAC of one answer: the status code and the ResultHeader
// value it carries, for that pod, UID and nonce.
func Proof(token, pod, uid, nonce string, status int, result string) string {
	m := hmac.New(sha256.New, []byte(token))
	for _, f := range []string{"zerodrop drain proof", pod, uid, nonce, strconv.Itoa(status), result} {
		m.Write([]byte(f))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// ValidProof reports whether got is the answer's proof (constant time).
func ValidProof(got, token, pod, uid, nonce string, status int, result string) bool {
	want := Proof(token, pod, uid, nonce, status, result)
	return hmac.Equal([]byte(got), []byte(want))
}

// provingWriter adds the proof to the answer when it is written: every
// answer the handler gives (drained, timeout, refused, busy) is proven.
type provingWriter struct {
	http.ResponseWriter
	token, pod, uid, nonce string
	wrote                  bool
}

func (p *provingWriter) WriteHeader(code int) {
	if !p.wrote {
		p.wrote = true
		p.Header().Set(ProofHeader, Proof(p.token, p.pod, p.uid, p.nonce, code, p.Header().Get(ResultHeader)))
	}
	p.ResponseWriter.WriteHeader(code)
}

func (p *provingWriter) Write(b []byte) (int, error) {
	if !p.wrote {
		p.WriteHeader(http.StatusOK)
	}
	return p.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (deadlines).
func (p *provingWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }
