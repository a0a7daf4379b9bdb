package haproxy

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"zerodrop.dev/zerodrop/internal/model"
)

// Replies captured from HAProxy 2.6.12 (columns of `show stat` cut down to
// the header names the parser looks up, plus a few neighbours).
const (
	statText = `# pxname,svname,qcur,scur,status,weight,type,check_status,addr,uweight
zd-meta,BACKEND,0,0,UP,0,1,,,0
zd:default.web:tcp-80,FRONTEND,,3,OPEN,,0,,,
zd:default.web:tcp-80,sock-1,,3,OPEN,,3,,127.0.0.50:18080,
zd:default.web:tcp-80,127.0.0.1:18001,0,2,UP,100,2,L4OK,127.0.0.1:18001,100
zd:default.web:tcp-80,127.0.0.1:18002,0,1,DRAIN,50,2,* L4OK,127.0.0.1:18002,50
zd:default.web:tcp-80,127.0.0.1:18003,0,0,MAINT,100,2,INI,127.0.0.1:18003,100
zd:default.web:tcp-80,127.0.0.1:18004,0,0,UP,0,2,L4OK,127.0.0.1:18004,0
zd:default.web:tcp-80,BACKEND,0,3,UP,100,1,,,100
zd:other.lb:tcp-443,FRONTEND,,0,OPEN,,0,,,
zd:other.lb:tcp-443,sock-1,,0,OPEN,,3,,[::1]:8443,
zd:other.lb:tcp-443,BACKEND,0,0,DOWN,0,1,,,0
hand-written,FRONTEND,,0,OPEN,,0,,,

`
	serversStateText = `1
# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port
3 zd:default.web:tcp-80 1 127.0.0.1:18001 127.0.0.1 2 0 100 100 7 6 3 4 6 0 0 0 - 18001 - 0 0 - - 0
3 zd:default.web:tcp-80 2 127.0.0.1:18002 127.0.0.1 2 8 50 50 1 6 3 4 6 0 0 0 - 18002 - 0 18002 - - 18002
3 zd:default.web:tcp-80 3 127.0.0.1:18003 127.0.0.1 0 1 100 100 0 1 0 0 2 0 0 0 - 18003 - 0 0 - - 0
3 zd:default.web:tcp-80 4 127.0.0.1:18004 127.0.0.1 2 0 0 100 7 6 3 4 6 0 0 0 - 18004 - 0 0 - - 0
9 hand-written 1 s1 10.0.0.1 2 0 1 1 7 6 3 4 6 0 0 0 - 80 - 0 0 - - 0

`
	mapText = `0x55e88b8fdb60 zd:default.web:tcp-80 fall=3&inter=1000&kind=tcp&rise=2
0x55e88b8fdb90 zd:other.lb:tcp-443 garbage=%zz

`
	procText = `#<PID>          <type>          <reloads>       <uptime>        <version>      
25289           master          2 [failed: 1]   0d00h22m43s     2.6.12-1+deb12u4
# workers
17170           worker          0               0d00h00m00s     2.6.12-1+deb12u4
# old workers
16661           worker          1               0d00h00m25s     2.6.12-1+deb12u4
16600           worker          2               0d00h00m30s     2.6.12-1+deb12u4
# programs

`
)

func TestParseStat(t *testing.T) {
	rows, err := parseStat(statText)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 12 {
		t.Fatalf("%d rows", len(rows))
	}
	want := StatRow{Proxy: "zd:default.web:tcp-80", Name: "127.0.0.1:18002", Type: statServer, Status: "DRAIN", Scur: 1, CheckStatus: "L4OK", Addr: "127.0.0.1:18002"}
	if diff := cmp.Diff(want, rows[4]); diff != "" {
		t.Errorf("server row (-want +got):\n%s", diff)
	}
	if rows[2].Type != statListener || rows[2].Addr != "127.0.0.50:18080" {
		t.Errorf("listener row %+v", rows[2])
	}
	// A quoted column with a comma (an agent's or a check's description)
	// before the used ones, a row cut short, and rows around them split in
	// place: each row gets its own columns.
	mixed := "# pxname,svname,desc,type,status,scur,check_status,addr,stot\n" +
		"p1,s1,plain,2,UP,3,L4OK,10.0.0.1:80,40\n" +
		"p2,s2,\"a, \"\"quoted\"\" one\",2,DOWN,0,* L4CON,10.0.0.2:80,\n" +
		"p3,s3,short,2\n" +
		"p4,s4,,3,OPEN,7,,127.0.0.9:443,12\n"
	got, err := parseStat(mixed)
	if err != nil {
		t.Fatal(err)
	}
	wantRows := []StatRow{
		{Proxy: "p1", Name: "s1", Type: statServer, Status: "UP", Scur: 3, Sessions: 40, CheckStatus: "L4OK", Addr: "10.0.0.1:80"},
		{Proxy: "p2", Name: "s2", Type: statServer, Status: "DOWN", Scur: 0, CheckStatus: "L4CON", Addr: "10.0.0.2:80"},
		{Proxy: "p3", Name: "s3", Type: statServer},
		{Proxy: "p4", Name: "s4", Type: statListener, Status: "OPEN", Scur: 7, Sessions: 12, Addr: "127.0.0.9:443"},
	}
	if diff := cmp.Diff(wantRows, got); diff != "" {
		t.Errorf("mixed rows (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"", "# pxname,svname\nx,y\n", "# pxname,svname,type,status,scur,check_status,addr,stot\nx,y,notanumber,,,,,\n"} {
		if _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q) accepted", bad)
		}
	}
}

func TestParseServersState(t *testing.T) {
	rows, err := parseServersState(serversStateText)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 5 {
		t.Fatalf("%d rows", len(rows))
	}
	want := serverStateRow{Backend: "zd:default.web:tcp-80", Name: "127.0.0.1:18002", Addr: "127.0.0.1", Port: 18002, OpState: 2, AdminState: 8, UWeight: 50, CheckState: 6}
	if diff := cmp.Diff(want, rows[1]); diff != "" {
		t.Errorf("row (-want +got):\n%s", diff)
	}
	if empty, err := parseServersState("1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_check_state srv_port\n"); err != nil || len(empty) != 0 {
		t.Errorf("no servers: %v, %v", empty, err)
	}
	for _, bad := range []string{"", "2\n# be_name\n", "1\nno header\n", "1\n# be_name srv_name\n"} {
		if _, err := parseServersState(bad); err == nil {
			t.Errorf("parseServersState(%q) accepted", bad)
		}
	}
}

func TestParseMap(t *testing.T) {
	m, err := parseMap(mapText)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m["zd:default.web:tcp-80"] != "fall=3&inter=1000&kind=tcp&rise=2" {
		t.Fatalf("map %v", m)
	}
	if m, err := parseMap("Unknown map identifier. Please use #<id> or <file>.\n"); err != nil || len(m) != 0 {
		t.Fatalf("map not loaded: %v, %v", m, err)
	}
	if _, err := parseMap("Permission denied\n"); err == nil {
		t.Fatal("error reply accepted")
	}
}

func TestParseProc(t *testing.T) {
	info, err := parseProc(procText)
	if err != nil {
		t.Fatal(err)
	}
	want := procInfo{Master: 25289, Reloads: 2, Failed: 1, Workers: []int{17170}, OldWorkers: []int{16661, 16600}}
	if diff := cmp.Diff(want, info); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := parseProc("Unknown command.\n"); err == nil {
		t.Error("reply without master accepted")
	}
}

func TestSnapshotModel(t *testing.T) {
	stat, err := parseStat(statText)
	if err != nil {
		t.Fatal(err)
	}
	servers, err := parseServersState(serversStateText)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := parseMap(mapText)
	if err != nil {
		t.Fatal(err)
	}
	snap := buildSnapshot(stat, servers, meta)

	got := snap.loadBalancer("default/web")
	want := &model.LoadBalancer{Key: "default/web", Listeners: []model.Listener{{
		Name: "default/web/tcp-80", Address: "127.0.0.50", Port: 18080, Protocol: model.TCP,
		Probe: model.Probe{Kind: model.ProbeTCP, IntervalMillis: 1000, Rise: 2, Fall: 3},
		Backends: []model.Backend{
			{Address: "127.0.0.1", Port: 18001, Weight: 100, State: model.Active},
			{Address: "127.0.0.1", Port: 18002, Weight: 0, State: model.Draining},
			{Address: "127.0.0.1", Port: 18003, Weight: 100, State: StateMaint},
			// uweight 0 takes no new connection: reported as draining.
			{Address: "127.0.0.1", Port: 18004, Weight: 0, State: model.Draining},
		},
	}}}
	if diff := cmp.Diff(want, got, cmpIgnoreVersion); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got.Version == "" || got.Version != version(want) {
		t.Errorf("version %q, want the hash of the state %q", got.Version, version(want))
	}

	// The maintenance server always differs from what is desired.
	desired := model.Canonical(want)
	desired.Listeners[0].Backends[2].State = model.Active
	desired.Listeners[0].Backends[2].Weight = 100
	if plan := model.Diff(got, desired); len(plan.Ops) != 1 || plan.Ops[0].Kind != model.OpUpdateBackend {
		t.Errorf("plan for a maintenance server: %s", plan)
	}

	// Undecodable metadata yields a zero probe (an update-listener heals it);
	// an IPv6 listener address loses its brackets.
	other := snap.loadBalancer("other/lb")
	if other == nil || other.Listeners[0].Probe != (model.Probe{}) || other.Listeners[0].Address != "::1" || other.Listeners[0].Port != 8443 {
		t.Errorf("other/lb: %+v", other)
	}
	if snap.loadBalancer("hand-written") != nil || snap.loadBalancer("nothing") != nil {
		t.Error("a proxy zerodrop does not own was observed")
	}
	if all := snap.all(); len(all) != 2 {
		t.Errorf("all: %v", all)
	}
}

var cmpIgnoreVersion = cmp.FilterPath(func(p cmp.Path) bool { return strings.HasSuffix(p.String(), "Version") }, cmp.Ignore())

func TestVersion(t *testing.T) {
	a := &model.LoadBalancer{Key: "k", Listeners: []model.Listener{{Name: "k/l", Address: "127.0.0.1", Port: 1, Protocol: model.TCP,
		Backends: []model.Backend{{Address: "10.0.0.2", Port: 1}, {Address: "10.0.0.1", Port: 1}}}}}
	b := model.Canonical(a)
	b.Version = "ignored"
	if version(a) != version(b) {
		t.Error("version depends on order or on the Version field")
	}
	c := model.Canonical(a)
	c.Listeners[0].Backends[0].State = model.Draining
	if version(a) == version(c) {
		t.Error("a drain does not change the version")
	}
	if version(nil) != "" {
		t.Error("absent load balancer has a version")
	}
}
