package awsapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Signature Version 4 as AWS verifies it ("Create a signed AWS API
// request", IAM user guide): the canonical request, the string to sign
// over the credential scope date/region/service/aws4_request, and the
// HMAC-SHA256 key chain. Written from the specification rather than with
// the SDK's signer, so that the SDK's signing is checked by something
// other than itself.

const sigAlgorithm = "AWS4-HMAC-SHA256"

// sigKind says which check failed, for the caller to pick the service's
// error code.
type sigKind int

const (
	sigMissing sigKind = iota + 1
	sigUnknownKey
	sigWrongScope
	sigMismatch
	sigExpired
)

type sigFailure struct {
	kind sigKind
	msg  string
}

// credentialScope is the parsed Credential= of an Authorization header.
type credentialScope struct {
	accessKey, date, region, service string
}

type authHeader struct {
	scope         credentialScope
	signedHeaders []string
	signature     string
}

func parseAuthorization(v string) (authHeader, bool) {
	var a authHeader
	rest, ok := strings.CutPrefix(v, sigAlgorithm+" ")
	if !ok {
		return a, false
	}
	for _, part := range strings.Split(rest, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return a, false
		}
		switch k {
		case "Credential":
			f := strings.Split(val, "/")
			if len(f) != 5 || f[4] != "aws4_request" {
				return a, false
			}
			a.scope = credentialScope{accessKey: f[0], date: f[1], region: f[2], service: f[3]}
		case "SignedHeaders":
			a.signedHeaders = strings.Split(val, ";")
		case "Signature":
			a.signature = val
		}
	}
	return a, a.scope.accessKey != "" && len(a.signedHeaders) > 0 && a.signature != ""
}

// verifier checks requests against one key pair, region and clock.
type verifier struct {
	accessKey, secret, region string
	// others are more key pairs it accepts, by access key ID.
	others map[string]string
	now    func() time.Time
	// skew is how far X-Amz-Date may be from now (AWS: 15 minutes).
	skew time.Duration
}

// verify checks req (whose body is body) as signed for service.
func (v verifier) verify(req *http.Request, body []byte, service string) *sigFailure {
	a, ok := parseAuthorization(req.Header.Get("Authorization"))
	if !ok {
		return &sigFailure{sigMissing, "Missing Authentication Token"}
	}
	secret, ok := v.secret, a.scope.accessKey == v.accessKey
	if !ok {
		secret, ok = v.others[a.scope.accessKey]
	}
	if !ok {
		return &sigFailure{sigUnknownKey, "The security token included in the request is invalid."}
	}
	if a.scope.service != service {
		return &sigFailure{sigWrongScope, "Credential should be scoped to correct service: '" + service + "'. "}
	}
	if a.scope.region != v.region {
		return &sigFailure{sigWrongScope, "Credential should be scoped to a valid region. "}
	}
	amzDate := req.Header.Get("X-Amz-Date")
	ts, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil || !strings.HasPrefix(amzDate, a.scope.date) {
		return &sigFailure{sigMismatch, "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP"}
	}
	if d := v.now().Sub(ts); d > v.skew || d < -v.skew {
		return &sigFailure{sigExpired, "Signature expired: " + amzDate + " is now earlier or later than the allowed skew."}
	}
	canonical := canonicalRequest(req, a.signedHeaders, body)
	want := signature(secret, a.scope, amzDate, canonical)
	if !hmac.Equal([]byte(want), []byte(a.signature)) {
		return &sigFailure{sigMismatch, "The request signature we calculated does not match the signature you provided. " +
			"Check your AWS Secret Access Key and signing method. Consult the service documentation for details."}
	}
	return nil
}

// signedBy is the access key ID req is signed with, "" when it is not
// signed; verify says whether the signature holds.
func signedBy(req *http.Request) string {
	a, _ := parseAuthorization(req.Header.Get("Authorization"))
	return a.scope.accessKey
}

func signature(secret string, s credentialScope, amzDate, canonical string) string {
	scope := strings.Join([]string{s.date, s.region, s.service, "aws4_request"}, "/")
	toSign := strings.Join([]string{sigAlgorithm, amzDate, scope, hexSHA256([]byte(canonical))}, "\n")
	key := hmacSHA256([]byte("AWS4"+secret), s.date)
	key = hmacSHA256(key, s.region)
	key = hmacSHA256(key, s.service)
	key = hmacSHA256(key, "aws4_request")
	return hex.EncodeToString(hmacSHA256(key, toSign))
}

func canonicalRequest(req *http.Request, signed []string, body []byte) string {
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	var headers strings.Builder
	for _, h := range signed {
		var vals []string
		if h == "host" {
			vals = []string{req.Host}
		} else {
			vals = req.Header.Values(h)
		}
		if h == "content-length" && len(vals) == 0 && req.ContentLength >= 0 {
			vals = []string{strconv.FormatInt(req.ContentLength, 10)}
		}
		for i, s := range vals {
			vals[i] = strings.Join(strings.Fields(s), " ")
		}
		headers.WriteString(h + ":" + strings.Join(vals, ",") + "\n")
	}
	return strings.Join([]string{req.Method, path, canonicalQuery(req.URL.Query()), headers.String(),
		strings.Join(signed, ";"), hexSHA256(body)}, "\n")
}

func canonicalQuery(q url.Values) string {
	var pairs []string
	for k, vs := range q {
		for _, v := range vs {
			pairs = append(pairs, uriEncode(k)+"="+uriEncode(v))
		}
	}
	sort.Strings(pairs)
	return strings.Join(pairs, "&")
}

// uriEncode is SigV4's encoding: RFC 3986 unreserved characters kept,
// everything else %XX in upper case.
func uriEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("-_.~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteString("%" + strings.ToUpper(hex.EncodeToString([]byte{c})))
	}
	return b.String()
}

func hexSHA256(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}
