package traffic

import (
	"context"
	"fmt"
	"time"
)

// sleepCtx sleeps for d; false when ctx ended first.
func SleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// WaitFor polls cond every 200 ms until it holds, timeout passes or ctx ends.
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, msg := cond()
		if ok {
			return nil
		}
		if msg != "" {
			last = msg
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not reached within %s: %s", what, timeout, last)
		}
		if !SleepCtx(ctx, 200*time.Millisecond) {
			return fmt.Errorf("%s: %w (%s)", what, ctx.Err(), last)
		}
	}
}
