package traffic

import (
	"context"
	"net"
	"time"
)

// dialer is a namespace's DialContext.
type dialer func(ctx context.Context, network, addr string) (net.Conn, error)

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
