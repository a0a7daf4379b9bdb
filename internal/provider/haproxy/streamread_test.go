package haproxy

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"

	"zerodrop.dev/zerodrop/internal/model"
)

// statReply generates a `show stat` reply of rows server rows as it is
// read, never whole: each row about 2 KiB, as a row of HAProxy's 80-odd
// columns is hundreds of bytes. Every 1 MiB handed out it samples the live
// heap, keeping the highest reading.
type statReply struct {
	rows, next int
	pending    []byte
	sinceLast  int
	total      int
	peak, base uint64
}

func (s *statReply) Read(b []byte) (int, error) {
	for len(s.pending) == 0 {
		if s.next > s.rows {
			return 0, io.EOF
		}
		if s.next == 0 {
			s.pending = []byte("# pxname,svname,type,status,scur,check_status,addr,stot,padding,\n")
		} else {
			s.pending = fmt.Appendf(nil, "zd:default.svc-%06d:tcp-80,srv-%d,2,UP,0,L4OK,10.0.%d.%d:80,7,%s,\n",
				s.next, s.next, s.next/250%250, s.next%250, strings.Repeat("x", 1960))
		}
		s.next++
	}
	n := copy(b, s.pending)
	s.pending = s.pending[n:]
	s.total += n
	if s.sinceLast += n; s.sinceLast >= 1<<20 {
		s.sinceLast = 0
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s.peak = max(s.peak, ms.HeapAlloc-min(ms.HeapAlloc, s.base))
	}
	return n, nil
}

// TestStatParsedAsItArrives: a `show stat` reply of 128 MiB is parsed line by
// line as it is read — the heap never holds it whole (at 10,000 load
// balancers the replies were 45 MiB of a data-plane replica's heap), only
// the rows kept from it, which are a small part of it.
func TestStatParsedAsItArrives(t *testing.T) {
	const rows = 64 << 10 // of 2 KiB: 128 MiB
	reply := &statReply{rows: rows}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	reply.base = ms.HeapAlloc
	got, err := parseStatFrom(reply)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != rows || got[rows-1].Name != fmt.Sprintf("srv-%d", rows) {
		t.Fatalf("%d rows parsed, want %d", len(got), rows)
	}
	size := uint64(reply.total)
	t.Logf("reply %d MiB; heap grew by at most %.1f MiB while it was read", size>>20, float64(reply.peak)/(1<<20))
	if reply.peak > size/2 {
		t.Errorf("the heap grew by %.1f MiB while a %d MiB reply was parsed: the reply is held, not parsed as it arrives",
			float64(reply.peak)/(1<<20), size>>20)
	}
}

// TestSnapshotsReadOneAtATime: snapshots read at once by many callers (the
// shared reads, Apply's version checks, the state endpoint) are read one
// after the other, each reading's three replies together, so that no two
// whole readings are held at once. On real HAProxy.
func TestSnapshotsReadOneAtATime(t *testing.T) {
	var c counter
	p := startOwned(t, t.TempDir(), &c)
	bs := startBackends(t, 2, "127.0.46")
	const key, lbAddr = "default/one-at-a-time", "127.0.0.76"
	applyDiff(t, p, &model.LoadBalancer{Key: key, Listeners: []model.Listener{listenerOf(key, "tcp-80", lbAddr, freePort(t, lbAddr), bs)}})
	c.take()
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				if _, err := p.snapshot(testContext(t)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	_, reads := c.take()
	var seq []string
	for _, r := range reads {
		if r == "show-stat" || r == "show-servers-state" || r == "show-map" {
			seq = append(seq, r)
		}
	}
	if len(seq) != 6*5*3 {
		t.Fatalf("%d readings' commands, want %d: %v", len(seq), 6*5*3, seq)
	}
	for i := 0; i < len(seq); i += 3 {
		if got := strings.Join(seq[i:i+3], " "); got != "show-stat show-servers-state show-map" {
			t.Fatalf("reading %d: %s; want one reading's three commands in a row (%v)", i/3, got, seq)
		}
	}
}
