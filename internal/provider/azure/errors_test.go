package azure

import (
	"net/http"
	"testing"
	"time"
)

// TestRetryAfterBounded: ARM's throttling headers say how long to wait, but a
// load balancer's work item must not be parked for longer than
// MaxRetryAfter whatever a response (or something answering in ARM's place)
// says; a missing or unreadable header gets the default.
func TestRetryAfterBounded(t *testing.T) {
	p := &Provider{opts: Options{DefaultRetryAfter: 10 * time.Second}}
	for _, tc := range []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{"seconds", http.Header{"Retry-After": {"17"}}, 17 * time.Second},
		{"milliseconds", http.Header{"Retry-After-Ms": {"1500"}}, 1500 * time.Millisecond},
		{"none", http.Header{}, 10 * time.Second},
		{"unreadable", http.Header{"Retry-After": {"soon"}}, 10 * time.Second},
		{"a year in seconds", http.Header{"Retry-After": {"31536000"}}, MaxRetryAfter},
		{"huge milliseconds", http.Header{"X-Ms-Retry-After-Ms": {"2147483647"}}, MaxRetryAfter},
		{"overflowing seconds", http.Header{"Retry-After": {"9223372036854775807"}}, MaxRetryAfter},
		{"a date far ahead", http.Header{"Retry-After": {time.Now().Add(48 * time.Hour).UTC().Format(http.TimeFormat)}}, MaxRetryAfter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.retryAfter(&http.Response{Header: tc.header}); got != tc.want {
				t.Errorf("retryAfter(%v) = %s, want %s", tc.header, got, tc.want)
			}
		})
	}
}
