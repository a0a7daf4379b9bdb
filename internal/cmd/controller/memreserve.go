package controller

import (
	"context"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"

	"github.com/go-logr/logr"
)

// memReserver lowers the Go runtime's soft memory limit while a child
// process runs in the controller's container: the limit is set for the
// controller alone (setMemoryLimit), and a data-plane replica's `haproxy -c`
// at each reload takes about as much again at 10,000 Services
// (haproxy.Options.ReserveMemory). Without the reservation the heap may
// fill the limit while the child parses, and the kernel kills the
// container.
type memReserver struct {
	log logr.Logger
	// setLimit is debug.SetMemoryLimit; inUse is the memory the limit is
	// checked against; free returns what it can to the OS.
	setLimit func(int64) int64
	inUse    func() uint64
	free     func()

	mu       sync.Mutex
	reserved int64 // the sum of the reservations held
	base     int64 // the limit with none held, read at the first
}

// minLimitShare: a reservation never takes the limit below this share of
// it (its denominator). A child larger than that does not fit anyway; the
// heap is left room to work in.
const minLimitShare = 4

func newMemReserver(log logr.Logger) *memReserver {
	return &memReserver{log: log, setLimit: debug.SetMemoryLimit, inUse: goMemoryInUse, free: debug.FreeOSMemory}
}

// reserve lowers the limit by n bytes until release is called. Without a
// limit (none set, or GOMEMLIMIT off) it does nothing. When the process
// uses more than the lowered limit, it returns memory to the OS first, so
// that the child finds room at once rather than once the heap next grows.
func (r *memReserver) reserve(_ context.Context, n int64) (release func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reserved == 0 {
		r.base = r.setLimit(-1)
	}
	if r.base == math.MaxInt64 || n <= 0 {
		return func() {}
	}
	r.reserved += n
	limit := max(r.base-r.reserved, r.base/minLimitShare)
	r.setLimit(limit)
	if r.inUse() > uint64(limit) {
		r.free()
	}
	r.log.V(1).Info("Go memory limit lowered for a child process", "reserved", n, "limit", limit)
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.reserved -= n
			r.setLimit(max(r.base-r.reserved, r.base/minLimitShare))
		})
	}
}

// goMemoryInUse is what the Go runtime compares with its memory limit: the
// memory it has mapped, less what it has returned to the OS.
func goMemoryInUse() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64() - s[1].Value.Uint64()
}
