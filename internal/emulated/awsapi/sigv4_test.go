package awsapi

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The "get-vanilla" case of AWS's Signature Version 4 test suite: a known
// request, key and signature, independent of this code and of the SDK.
func TestSignatureTestSuiteVector(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "https://example.amazonaws.com/", nil)
	req.Host = "example.amazonaws.com"
	req.Header.Set("X-Amz-Date", "20150830T123600Z")
	canonical := canonicalRequest(req, []string{"host", "x-amz-date"}, nil)
	s := credentialScope{accessKey: "AKIDEXAMPLE", date: "20150830", region: "us-east-1", service: "service"}
	got := signature("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", s, "20150830T123600Z", canonical)
	if want := "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"; got != want {
		t.Fatalf("signature %s, want %s\ncanonical request:\n%s", got, want, canonical)
	}
}

func TestVerifyRefusals(t *testing.T) {
	now := time.Date(2015, 8, 30, 12, 36, 0, 0, time.UTC)
	v := verifier{accessKey: "AKIDEXAMPLE", secret: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", region: "us-east-1",
		now: func() time.Time { return now }, skew: 15 * time.Minute}
	signed := func(region, service, secret string) *http.Request {
		req, _ := http.NewRequest(http.MethodPost, "https://127.0.0.1:1/", strings.NewReader("Action=X"))
		req.Host = "127.0.0.1:1"
		req.Header.Set("X-Amz-Date", "20150830T123600Z")
		s := credentialScope{accessKey: "AKIDEXAMPLE", date: "20150830", region: region, service: service}
		sig := signature(secret, s, "20150830T123600Z", canonicalRequest(req, []string{"host", "x-amz-date"}, []byte("Action=X")))
		req.Header.Set("Authorization", sigAlgorithm+" Credential=AKIDEXAMPLE/20150830/"+region+"/"+service+
			"/aws4_request, SignedHeaders=host;x-amz-date, Signature="+sig)
		return req
	}
	cases := []struct {
		name string
		req  *http.Request
		body string
		want sigKind
	}{
		{"good", signed("us-east-1", "ec2", v.secret), "Action=X", 0},
		{"wrong signing name", signed("us-east-1", "elasticloadbalancing", v.secret), "Action=X", sigWrongScope},
		{"wrong region", signed("eu-west-1", "ec2", v.secret), "Action=X", sigWrongScope},
		{"wrong secret", signed("us-east-1", "ec2", "other"), "Action=X", sigMismatch},
		{"body changed after signing", signed("us-east-1", "ec2", v.secret), "Action=Y", sigMismatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := v.verify(c.req, []byte(c.body), "ec2")
			switch {
			case c.want == 0 && f != nil:
				t.Fatalf("refused: %+v", f)
			case c.want != 0 && (f == nil || f.kind != c.want):
				t.Fatalf("got %+v, want kind %d", f, c.want)
			}
		})
	}
	late := v
	late.now = func() time.Time { return now.Add(16 * time.Minute) }
	if f := late.verify(signed("us-east-1", "ec2", v.secret), []byte("Action=X"), "ec2"); f == nil || f.kind != sigExpired {
		t.Fatalf("16 minutes late: %+v", f)
	}
}
