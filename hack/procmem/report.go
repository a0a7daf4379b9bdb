package main

import (
	"cmp"
	"fmt"
	"strconv"
	"time"
)

// phaseRow is one phase's line of the report: the controller's reading at
// its end, what it did during it (CPU, writes, OOM kills: the difference
// from the reading before, on the same process), and HAProxy's.
type phaseRow struct {
	name string
	// took is how long the phase took to be done (0: a phase of waiting,
	// -idle).
	took time.Duration
	r    reading
	// cpu, writes, reloads and oom happened during the phase; hcpu,
	// hreloads and hoom for HAProxy (every process, current and old).
	cpu, writes, reloads, hcpu float64
	// apiWrites are the controller's requests to the apiserver that
	// write (Service status and finalizers, Events, the leader Lease's
	// renewals), during the phase.
	apiWrites float64
	hreloads  int
	oom, hoom int64
	// peak and hpeak are the memory cgroups' peaks during the phase (v1;
	// v2: since the cgroup's creation); -1 without a cgroup.
	peak, hpeak int64
}

// meter turns readings into phase rows: it keeps the previous reading of
// the controller process (reset by a new process) and of HAProxy.
type meter struct {
	prev     *reading
	prevHP   haproxyReading
	prevOOM  int64
	prevHOOM int64
	rows     []phaseRow
}

// newProcess says the next reading is of a new controller process: its
// CPU and writes count from zero.
func (m *meter) newProcess() { m.prev = nil }

// start is called before a phase begins: the cgroups' peaks start over.
func (m *meter) start() {
	for _, g := range []*memCgroup{controllerCgroup, haproxyCgroup} {
		if g != nil {
			g.resetPeak()
		}
	}
}

// row records the phase name, done after took, whose last reading is r.
func (m *meter) row(name string, took time.Duration, r reading) {
	row := phaseRow{name: name, took: took, r: r, peak: -1, hpeak: -1,
		cpu: r.cpu, writes: r.metric("zerodrop_provider_writes_total"), reloads: r.metric("zerodrop_provider_writes_total", "op", "reload"),
		apiWrites: r.apiWrites()}
	if p := m.prev; p != nil {
		row.cpu = sub(r.cpu, p.cpu)
		row.apiWrites = sub(row.apiWrites, p.apiWrites())
		row.writes = sub(row.writes, p.metric("zerodrop_provider_writes_total"))
		row.reloads = sub(row.reloads, p.metric("zerodrop_provider_writes_total", "op", "reload"))
	}
	if r.hp.ok {
		row.hcpu = sub(r.hp.cpu, m.prevHP.cpu)
		row.hreloads = r.hp.reloads - m.prevHP.reloads
		m.prevHP = r.hp
	} else {
		row.hcpu = -1
	}
	if g := controllerCgroup; g != nil {
		n, _ := g.oomKills()
		row.oom, m.prevOOM = n-m.prevOOM, n
		row.peak = g.peak()
	}
	if g := haproxyCgroup; g != nil {
		n, _ := g.oomKills()
		row.hoom, m.prevHOOM = n-m.prevHOOM, n
		row.hpeak = g.peak()
	}
	m.prev = &r
	m.rows = append(m.rows, row)
	m.start()
}

// oomKills is every OOM kill seen in the cgroups.
func (m *meter) oomKills() int64 { return m.prevOOM + m.prevHOOM }

// sub is a-b where both are read (not -1); a alone (the first reading)
// where b is not.
func sub(a, b float64) float64 {
	if a < 0 {
		return a
	}
	if b < 0 {
		return a
	}
	return a - b
}

// print writes the report's tables: the controller's and, where there is
// an HAProxy, its processes'.
func (m *meter) print() {
	fmt.Println("| phase | done after | peak RSS (VmHWM) | RSS | Go heap in use | Go memory from the OS | GOMEMLIMIT | CPU | provider writes (reloads) | API writes | cgroup peak | OOM kills |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range m.rows {
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s (%s) | %s | %s | %s |\n", r.name, took(r.took), mib(r.r.hwm), mib(r.r.rss),
			mibF(r.r.metric("go_memstats_heap_inuse_bytes")), mibF(r.r.metric("go_memstats_sys_bytes")),
			limit(r.r.metric("go_gc_gomemlimit_bytes")), cpuSeconds(r.cpu),
			count(r.writes), count(r.reloads), count(r.apiWrites), cgroupBytes(r.peak), oomText(controllerCgroup, r.oom))
	}
	fmt.Println("API writes: the controller's requests to the apiserver that write (POST, PUT, PATCH, DELETE: Service status and finalizers, Events, the leader Lease's renewals), from its rest_client_requests_total")
	if g := cmp.Or(controllerCgroup, haproxyCgroup); g != nil {
		when := "in the phase"
		if g.v2 {
			when = "since the run began (cgroup v2's memory.peak)"
		}
		fmt.Printf("cgroup peak: the memory cgroup's highest use %s, what its limit is checked against: the pages its processes touched and the page cache they caused, not the binary's pages, which the build before had already read\n", when)
	}
	hasHP := false
	for _, r := range m.rows {
		hasHP = hasHP || r.r.hp.ok
	}
	if !hasHP {
		return
	}
	shared := ""
	if *role == "all" {
		shared = " (its memory cgroup is the controller's, above)"
	}
	fmt.Printf("\nHAProxy: the master and its workers, current and old%s\n", shared)
	fmt.Println("| phase | HAProxy reloads | PSS (master and workers) | CPU | cgroup peak | OOM kills |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, r := range m.rows {
		if !r.r.hp.ok {
			fmt.Printf("| %s | n/a | n/a | n/a | n/a | n/a |\n", r.name)
			continue
		}
		fmt.Printf("| %s | %d | %s | %s | %s | %s |\n", r.name, r.hreloads, mib(r.r.hp.pss), cpuSeconds(r.hcpu), cgroupBytes(r.hpeak), oomText(haproxyCgroup, r.hoom))
	}
}

func took(d time.Duration) string {
	if d <= 0 {
		return "–"
	}
	return d.Round(100 * time.Millisecond).String()
}

func cgroupBytes(v int64) string {
	if v < 0 {
		return "n/a"
	}
	return mib(uint64(v))
}

func oomText(g *memCgroup, n int64) string {
	if g == nil {
		return "n/a"
	}
	return strconv.FormatInt(n, 10)
}

func mib(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func mibF(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f MiB", v/(1<<20))
}

func limit(v float64) string {
	if v < 0 {
		return "n/a"
	}
	if v >= 1<<62 {
		return "none"
	}
	return mibF(v)
}

func count(v float64) string {
	if v < 0 {
		return "0"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
