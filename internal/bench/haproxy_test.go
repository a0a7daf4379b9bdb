package bench

import (
	"context"
	"time"

	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// stopHAProxy stops the HAProxy a benchmark started in dir.
func stopHAProxy(dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = haproxy.StopDir(ctx, dir)
}

// labAddressMap publishes loopback backends with addresses the API server
// accepts (it refuses loopback endpoints): --backend-address-map.
const labAddressMap = "198.18.0.0/15=127.18.0.0/15"
