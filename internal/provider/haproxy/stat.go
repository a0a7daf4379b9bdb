package haproxy

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ReadStat sends `show stat` to the admin socket of an HAProxy (a path) and
// parses the reply: the one reader of `show stat` for code outside the
// provider (the lab's data-plane scenario reads its replicas' sessions with
// it), so that one parser, with its columns found by the header, serves
// both. The provider itself reads it within its snapshot's exchange (see
// snapshot), not through here.
func ReadStat(ctx context.Context, adminSocket string) ([]StatRow, error) {
	text, err := runtimeClient{path: adminSocket}.do(ctx, "show stat")
	if err != nil {
		return nil, err
	}
	rows, err := parseStat(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", adminSocket, err)
	}
	return rows, nil
}

// Row types of `show stat`.
const (
	statFrontend = 0
	statBackend  = 1
	statServer   = 2
	statListener = 3
)

// StatRow is one row of `show stat`, the columns the provider and the lab
// use.
type StatRow struct {
	Proxy       string // pxname
	Name        string // svname: a server's name, FRONTEND, BACKEND or a listener's
	Type        int    // 0 frontend, 1 backend, 2 server, 3 listener
	Status      string
	Scur        int64 // sessions open now
	Sessions    int64 // stot: sessions since the process started
	CheckStatus string
	Addr        string
}

// IsFrontend reports whether the row is a proxy's FRONTEND row.
func (r StatRow) IsFrontend() bool { return r.Type == statFrontend }

// parseStat parses `show stat` CSV, locating columns by the header.
func parseStat(text string) ([]StatRow, error) { return parseStatFrom(strings.NewReader(text)) }

// parseStatFrom is parseStat reading the reply from r line by line, as it
// arrives: the reply is never held whole.
func parseStatFrom(r io.Reader) ([]StatRow, error) {
	// The columns used, in the order of statFields; slot maps a column to
	// its place there.
	statFields := []string{"pxname", "svname", "type", "status", "scur", "check_status", "addr", "stot"}
	var (
		slot  []int
		rows  []StatRow
		proxy string
		f     = make([]string, len(statFields))
	)
	// Thousands of rows of about 80 columns, read on every snapshot: a row
	// without quotes is split in place and only the used columns kept
	// (copied, so that the line itself can be freed); a quoted one goes
	// through the CSV reader.
	err := eachLine(r, func(line string) error {
		if line == "" {
			return nil
		}
		if slot == nil {
			header, err := csvLine(strings.TrimPrefix(line, "# "))
			if err != nil {
				return fmt.Errorf("show stat: header: %w", err)
			}
			if slot, err = statSlots(header, statFields); err != nil {
				return err
			}
			return nil
		}
		clear(f)
		if strings.IndexByte(line, '"') < 0 {
			pickFields(line, slot, f)
		} else {
			rec, err := csvLine(line)
			if err != nil {
				return fmt.Errorf("show stat: %w", err)
			}
			for i, v := range rec {
				if i < len(slot) && slot[i] >= 0 {
					f[slot[i]] = v
				}
			}
		}
		typ, err := strconv.Atoi(f[2])
		if err != nil {
			return fmt.Errorf("show stat: %s/%s: type %q", f[0], f[1], f[2])
		}
		scur, _ := strconv.ParseInt(f[4], 10, 64)
		stot, _ := strconv.ParseInt(f[7], 10, 64)
		// A proxy's rows come together: its name is copied once.
		if f[0] != proxy {
			proxy = strings.Clone(f[0])
		}
		rows = append(rows, StatRow{
			Proxy: proxy, Name: strings.Clone(f[1]), Type: typ, Status: strings.Clone(f[3]), Scur: scur, Sessions: stot,
			CheckStatus: strings.Clone(strings.TrimPrefix(f[5], "* ")), Addr: strings.Clone(f[6]),
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if slot == nil {
		return nil, errors.New("show stat: header: empty reply")
	}
	return rows, nil
}

// statSlots maps each column of header to its place in fields (-1: not
// used).
func statSlots(header, fields []string) ([]int, error) {
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	slot := make([]int, len(header))
	for i := range slot {
		slot[i] = -1
	}
	for k, need := range fields {
		i, ok := col[need]
		if !ok && need == "stot" {
			// Only the lab's session counts read it; a reply without it
			// (a test's fake HAProxy) reads as 0.
			continue
		}
		if !ok {
			return nil, fmt.Errorf("show stat: no %q column in %q", need, strings.Join(header, ","))
		}
		slot[i] = k
	}
	return slot, nil
}

// eachLine calls fn with each line of r (without its newline), reading r
// as it arrives.
func eachLine(r io.Reader, fn func(line string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		if err := fn(sc.Text()); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	return nil
}

// csvLine reads one CSV record.
func csvLine(line string) ([]string, error) {
	r := csv.NewReader(strings.NewReader(line))
	r.FieldsPerRecord = -1
	r.LazyQuotes = true
	return r.Read()
}

// pickFields sets out[slot[i]] to column i of a CSV line without quotes,
// for every column with a slot.
func pickFields(line string, slot []int, out []string) {
	for i := 0; i < len(slot); i++ {
		end := strings.IndexByte(line, ',')
		if end < 0 {
			end = len(line)
		}
		if slot[i] >= 0 {
			out[slot[i]] = line[:end]
		}
		if end == len(line) {
			return
		}
		line = line[end+1:]
	}
}

// MasterProcs reads `show proc` on the master socket of an HAProxy (a
// path): its master, reload count, current and old workers — for code
// outside the provider (hack/procmem's old-worker readings), with the
// provider's parser.
func MasterProcs(ctx context.Context, masterSocket string) (master, reloads int, workers, oldWorkers []int, err error) {
	text, err := runtimeClient{path: masterSocket}.do(ctx, "show proc")
	if err != nil {
		return 0, 0, nil, nil, err
	}
	info, err := parseProc(text)
	return info.Master, info.Reloads, info.Workers, info.OldWorkers, err
}

// WorkerConns is worker pid's current connections (`show info`'s
// CurrConns), asked through the master socket; for code outside the
// provider, as MasterProcs.
func WorkerConns(ctx context.Context, masterSocket string, pid int) (int, error) {
	text, err := runtimeClient{path: masterSocket}.do(ctx, fmt.Sprintf("@!%d show info", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, "CurrConns: "); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("worker %d: no CurrConns in show info", pid)
}
