package azure

import (
	"testing"
	"time"
)

// TestHealthReadDue: a rule's health is read again maxAge after the last
// read began, whether or not it has answered (reads overlap where ARM's
// operation is slower than maxAge: at 10 s of ARM latency one read at a
// time, each begun maxAge after the last answer, left a new pod's probe Up
// unseen for up to 25 s), never more than maxHealthReads at once, and not
// within maxAge of a failure.
func TestHealthReadDue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const maxAge = 5 * time.Second
	for _, tc := range []struct {
		name string
		h    ruleHealth
		now  time.Time
		due  bool
	}{
		{name: "never read", now: t0, due: true},
		{name: "one read running, begun maxAge ago", h: ruleHealth{reading: 1, begun: t0}, now: t0.Add(maxAge), due: true},
		{name: "one read running, begun less than maxAge ago", h: ruleHealth{reading: 1, begun: t0}, now: t0.Add(maxAge - time.Millisecond)},
		{name: "answered just now, begun maxAge ago", h: ruleHealth{begun: t0, asked: t0, at: t0.Add(maxAge)}, now: t0.Add(maxAge), due: true},
		{name: "maxHealthReads running", h: ruleHealth{reading: maxHealthReads, begun: t0}, now: t0.Add(time.Minute)},
		{name: "failed less than maxAge ago", h: ruleHealth{begun: t0, failedAt: t0.Add(time.Minute)}, now: t0.Add(time.Minute + maxAge - time.Millisecond)},
		{name: "failed maxAge ago", h: ruleHealth{begun: t0, failedAt: t0.Add(time.Minute)}, now: t0.Add(time.Minute + maxAge), due: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.h.due(tc.now, maxAge); got != tc.due {
				t.Errorf("due = %v, want %v", got, tc.due)
			}
		})
	}
}

// TestHealthAnswerNewer: of overlapping reads, an answer is kept only if
// its read began after the kept answer's: one begun earlier that ends later
// is older news.
func TestHealthAnswerNewer(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		h     ruleHealth
		asked time.Time
		newer bool
	}{
		{name: "no answer yet", asked: t0, newer: true},
		{name: "begun after the kept answer's read", h: ruleHealth{asked: t0, at: t0.Add(10 * time.Second)}, asked: t0.Add(5 * time.Second), newer: true},
		{name: "begun before the kept answer's read", h: ruleHealth{asked: t0.Add(5 * time.Second), at: t0.Add(15 * time.Second)}, asked: t0},
		{name: "the same read", h: ruleHealth{asked: t0, at: t0.Add(10 * time.Second)}, asked: t0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.h.newer(tc.asked); got != tc.newer {
				t.Errorf("newer = %v, want %v", got, tc.newer)
			}
		})
	}
}
