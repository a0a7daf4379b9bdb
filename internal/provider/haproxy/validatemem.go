package haproxy

import (
	"bytes"
	"context"
)

// `haproxy -c` parses the whole configuration into HAProxy's structures: a
// child of the controller, so in its container and under its memory limit,
// once at every reload. Measured with HAProxy 2.6.12 (2 threads; the
// thread count changes it little): peak RSS about 14 MiB plus 9 KiB per
// listener and 4.2 KiB per server — 31 MiB at 1,000 listeners of two
// servers, 98 MiB at 5,000, 181 MiB at 10,000, 501 MiB at 10,000 of ten.
const (
	validateBase        = 14 << 20
	validatePerListener = 9 << 10
	validatePerServer   = 4300
)

// validateBytes is the memory a validation of cfg, a rendered
// configuration, is expected to take at its peak.
func validateBytes(cfg []byte) int64 {
	listeners := bytes.Count(cfg, []byte("\nlisten "))
	servers := bytes.Count(cfg, []byte("\n    server "))
	return validateBase + int64(listeners)*validatePerListener + int64(servers)*validatePerServer
}

// reserveForValidation tells Options.ReserveMemory (when set) that a
// validation of cfg is about to run, and returns what to call once it has
// ended.
func (p *Provider) reserveForValidation(ctx context.Context, cfg []byte) (release func()) {
	if p.opts.ReserveMemory == nil {
		return func() {}
	}
	return p.opts.ReserveMemory(ctx, validateBytes(cfg))
}
