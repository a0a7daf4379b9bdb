package controller

import (
	"context"
	"math"
	"testing"

	"github.com/go-logr/logr"
)

// fakeLimit stands for the Go runtime's limit and its memory in use (pure
// logic: the real ones are process-wide).
type fakeLimit struct {
	limit int64
	inUse uint64
	frees int
}

func (f *fakeLimit) reserver() *memReserver {
	return &memReserver{log: logr.Discard(),
		setLimit: func(n int64) int64 {
			old := f.limit
			if n >= 0 {
				f.limit = n
			}
			return old
		},
		inUse: func() uint64 { return f.inUse },
		free:  func() { f.frees++; f.inUse = 0 },
	}
}

func TestMemReserver(t *testing.T) {
	const mib = 1 << 20
	ctx := context.Background()
	cases := []struct {
		name      string
		limit     int64
		inUse     uint64
		reserve   []int64 // held together, released in order
		wantHeld  int64   // the limit while all are held
		wantFrees int
	}{
		{name: "one reservation below the heap", limit: 461 * mib, inUse: 400 * mib, reserve: []int64{181 * mib}, wantHeld: 280 * mib, wantFrees: 1},
		{name: "heap already below", limit: 461 * mib, inUse: 100 * mib, reserve: []int64{181 * mib}, wantHeld: 280 * mib},
		{name: "two at once add up", limit: 400 * mib, inUse: 0, reserve: []int64{100 * mib, 50 * mib}, wantHeld: 250 * mib},
		{name: "never below a quarter", limit: 400 * mib, inUse: 0, reserve: []int64{390 * mib}, wantHeld: 100 * mib},
		{name: "no limit: untouched", limit: math.MaxInt64, inUse: 400 * mib, reserve: []int64{181 * mib}, wantHeld: math.MaxInt64},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeLimit{limit: tc.limit, inUse: tc.inUse}
			r := f.reserver()
			var releases []func()
			for _, n := range tc.reserve {
				releases = append(releases, r.reserve(ctx, n))
			}
			if f.limit != tc.wantHeld {
				t.Errorf("limit while held %d MiB, want %d MiB", f.limit/mib, tc.wantHeld/mib)
			}
			if f.frees != tc.wantFrees {
				t.Errorf("memory returned to the OS %d times, want %d", f.frees, tc.wantFrees)
			}
			for _, release := range releases {
				release()
				release() // a second call changes nothing
			}
			if f.limit != tc.limit {
				t.Errorf("limit after release %d, want %d (as before)", f.limit, tc.limit)
			}
			// The limit read again at the next reservation: one changed
			// meanwhile (nothing held) is the new base.
			f.limit = tc.limit / 2
			release := r.reserve(ctx, 10*mib)
			if want := max(tc.limit/2-10*mib, tc.limit/2/minLimitShare); tc.limit != math.MaxInt64 && f.limit != want {
				t.Errorf("after the base changed: limit %d MiB, want %d MiB", f.limit/mib, want/mib)
			}
			release()
			if f.limit != tc.limit/2 {
				t.Errorf("after the base changed and release: limit %d, want %d", f.limit, tc.limit/2)
			}
		})
	}
}
