package traffic

import (
	"context"
	"net"
)

// dialer is a namespace's DialContext.
type dialer func(ctx context.Context, network, addr string) (net.Conn, error)
