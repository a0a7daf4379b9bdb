package haproxy

// An HAProxy worker holds a whole configuration. Measured with HAProxy 2.6
// (2 threads, listeners of two checked servers each): about 5 MiB plus
// 29 KiB per listener — 11.0 MiB at 200, 34 MiB at 1,000, 146.5 MiB at
// 5,000 (charts/zerodrop/README.md, "HAProxy's memory") — and the master
// about 6 MiB. A reload adds about one and a half configurations while the
// new one is parsed.
const (
	workerBase        = 5 << 20
	workerPerListener = 29 << 10
	masterBytes       = 6 << 20
)

// oldWorkerBound is the mworker-max-reloads rendered for proxies: fixed
// when set (Options.MaxOldWorkers), else, with a memory limit
// (Options.MemoryLimit), as many old workers as fit beside the master, the
// current worker and a reload's one and a half configurations, at least
// one; else none (zero). Derived from the configuration, the bound follows
// the cluster: at a few dozen Services hundreds of old workers fit and no
// WebSocket is ended by it, at thousands a handful — where each old worker
// costs what the whole configuration does.
func oldWorkerBound(fixed int, limit int64, proxies []proxySpec) int {
	if fixed > 0 || limit <= 0 {
		return fixed
	}
	worker := int64(workerBase + workerPerListener*len(proxies))
	n := (2*(limit-masterBytes)/worker - 5) / 2 // (limit - master)/worker - 2.5
	return int(max(n, 1))
}
