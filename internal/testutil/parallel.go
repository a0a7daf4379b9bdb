package testutil

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Parallel calls f(0) … f(n-1) on workers goroutines (the benches and
// hack/procmem create thousands of objects this way against a real API
// server) and returns the first error, naming its item; after an error no
// further item is started. A worker that failed keeps taking items (and
// skips them) so that handing out the next one never blocks: when every
// worker had returned at its error, the loop handing out items waited
// forever.
func Parallel(n, workers int, f func(int) error) error {
	next := make(chan int)
	var (
		failed   atomic.Bool
		once     sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	for w := 0; w < max(workers, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if failed.Load() {
					continue
				}
				if err := f(i); err != nil {
					once.Do(func() { firstErr = fmt.Errorf("item %d: %w", i, err) })
					failed.Store(true)
				}
			}
		}()
	}
	for i := 0; i < n && !failed.Load(); i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return firstErr
}
