package service

import (
	"testing"
	"time"
)

// TestRetryBackoffCapped: a load balancer whose reconcile failed many times in
// a row is retried within maxRetryDelay, not after client-go's default
// 1000 s; the first retries stay fast.
func TestRetryBackoffCapped(t *testing.T) {
	l := retryLimiter()
	const key = "ns/web"
	var last time.Duration
	for i := 0; i < 40; i++ {
		last = l.When(key)
		if i == 0 && last > time.Second {
			t.Fatalf("first retry after %s, want a fast one", last)
		}
	}
	if last > maxRetryDelay {
		t.Errorf("after 40 failures the next retry is in %s, want at most %s", last, maxRetryDelay)
	}
	if last < maxRetryDelay/2 {
		t.Errorf("after 40 failures the next retry is in %s: the backoff does not grow", last)
	}
	l.Forget(key)
	if d := l.When(key); d > time.Second {
		t.Errorf("after Forget the next retry is in %s, want a fast one again", d)
	}
}
