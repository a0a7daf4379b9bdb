package testutil

import (
	"errors"
	"sync/atomic"
	"testing"
)

// TestParallel: every item is called once when none fails; a failure is
// returned naming its item, and the items not yet handed out are not
// started.
func TestParallel(t *testing.T) {
	var calls [100]atomic.Int32
	if err := Parallel(len(calls), 4, func(i int) error { calls[i].Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range calls {
		if n := calls[i].Load(); n != 1 {
			t.Errorf("item %d called %d times, want 1", i, n)
		}
	}
	boom := errors.New("boom")
	var started atomic.Int32
	err := Parallel(1000, 1, func(i int) error {
		started.Add(1)
		if i == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || err.Error() != "item 3: boom" {
		t.Errorf("error %v, want item 3: boom", err)
	}
	// One worker: items 0-3 ran, and at most the one handed out while the
	// error was being reported after them.
	if n := started.Load(); n > 5 {
		t.Errorf("%d items started after a failure at item 3 with one worker, want at most 5", n)
	}
}
