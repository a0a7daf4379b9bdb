package haproxy

import (
	"strings"
	"testing"
	"time"

	"zerodrop.dev/zerodrop/internal/model"
)

func TestRender(t *testing.T) {
	base := renderInput{AdminSocket: "/s/admin.sock", StateFile: "/s/server-state", MapFile: "/s/listeners.map", IdleTimeout: 10 * time.Minute}
	tcp := model.Probe{Kind: model.ProbeTCP, IntervalMillis: 2000, Rise: 2, Fall: 3}
	for _, tc := range []struct {
		name     string
		proxies  []proxySpec
		hardStop time.Duration
		want     []string // lines of the configuration, in this order
		wantMeta []string
		notWant  []string
		err      string
	}{{
		name: "empty",
		want: []string{
			"global",
			"    stats socket /s/admin.sock mode 600 level admin expose-fd listeners",
			"    server-state-file /s/server-state",
			"defaults",
			"    mode tcp",
			"    timeout client 600000ms",
			"    load-server-state-from-file global",
			"backend zd-meta",
			"    tcp-request content set-var(txn.zd_meta) str(),map(/s/listeners.map)",
		},
		notWant: []string{"listen ", "hard-stop-after"},
	}, {
		name:     "tcp listener with active, draining and maintenance servers",
		hardStop: time.Minute,
		proxies: []proxySpec{{Key: "default/web", Listener: model.Listener{
			Name: "default/web/tcp-80", Address: "127.0.0.50", Port: 8080, Protocol: model.TCP, Probe: tcp,
			Backends: []model.Backend{
				{Address: "127.0.1.1", Port: 9000, Weight: 100, State: model.Active},
				{Address: "127.0.1.2", Port: 9000, Weight: 100, State: model.Draining},
				{Address: "127.0.1.3", Port: 9000, State: StateMaint},
				{Address: "127.0.1.4", Port: 9000},
			},
		}}},
		want: []string{
			"    hard-stop-after 60000ms",
			"# default/web/tcp-80",
			"listen zd:default.web:tcp-80",
			"    bind 127.0.0.50:8080",
			"    option socket-stats",
			"    balance roundrobin",
			"    server 127.0.1.1:9000 127.0.1.1:9000 weight 100 check inter 2000 fastinter 500 rise 2 fall 3",
			"    server 127.0.1.2:9000 127.0.1.2:9000 weight 0 check inter 2000 fastinter 500 rise 2 fall 3",
			"    server 127.0.1.3:9000 127.0.1.3:9000 weight 0 check inter 2000 fastinter 500 rise 2 fall 3 disabled",
			"    server 127.0.1.4:9000 127.0.1.4:9000 weight 100 check inter 2000 fastinter 500 rise 2 fall 3",
		},
		wantMeta: []string{"zd:default.web:tcp-80 fall=3&inter=2000&kind=tcp&rise=2"},
		notWant:  []string{"httpchk"},
	}, {
		name: "http probe on the health-check node port, zero probe fields defaulted",
		proxies: []proxySpec{{Key: "default/local", Listener: model.Listener{
			Name: "default/local/tcp-443", Address: "::1", Port: 443, Protocol: model.TCP,
			Probe:    model.Probe{Kind: model.ProbeHTTP, Port: 31000, Path: "/healthz"},
			Backends: []model.Backend{{Address: "127.0.1.1", Port: 30443, Weight: 5, State: model.Active}},
		}}},
		want: []string{
			"listen zd:default.local:tcp-443",
			"    bind ipv6@::1:443",
			"    option httpchk GET /healthz",
			"    server 127.0.1.1:30443 127.0.1.1:30443 weight 5 check inter 2000 rise 2 fall 3 port 31000",
		},
		wantMeta: []string{"zd:default.local:tcp-443 fall=0&inter=0&kind=http&path=%2Fhealthz&port=31000&rise=0"},
	}, {
		name: "udp refused",
		proxies: []proxySpec{{Key: "k", Listener: model.Listener{
			Name: "k/udp-53", Address: "127.0.0.1", Port: 53, Protocol: model.UDP,
		}}},
		err: "not supported",
	}, {
		name: "weight above 256 refused",
		proxies: []proxySpec{{Key: "k", Listener: model.Listener{
			Name: "k/tcp-1", Address: "127.0.0.1", Port: 1, Protocol: model.TCP,
			Backends: []model.Backend{{Address: "127.0.0.2", Port: 1, Weight: 300}},
		}}},
		err: "weight 300",
	}, {
		name: "probe path that would break the configuration refused",
		proxies: []proxySpec{{Key: "k", Listener: model.Listener{
			Name: "k/tcp-1", Address: "127.0.0.1", Port: 1, Protocol: model.TCP,
			Probe: model.Probe{Kind: model.ProbeHTTP, Path: "/a b#c"},
		}}},
		err: "probe path",
	}, {
		name: "hostname refused",
		proxies: []proxySpec{{Key: "k", Listener: model.Listener{
			Name: "k/tcp-1", Address: "lb.example", Port: 1, Protocol: model.TCP,
		}}},
		err: "not an IP address",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			in := base
			in.Proxies, in.HardStopAfter = tc.proxies, tc.hardStop
			cfg, meta, err := render(in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			assertLinesInOrder(t, string(cfg), tc.want)
			assertLinesInOrder(t, string(meta), tc.wantMeta)
			for _, s := range tc.notWant {
				if strings.Contains(string(cfg), s) {
					t.Errorf("config contains %q:\n%s", s, cfg)
				}
			}
			// Rendering is a pure function of its input.
			cfg2, meta2, _ := render(in)
			if string(cfg2) != string(cfg) || string(meta2) != string(meta) {
				t.Error("render is not deterministic")
			}
		})
	}
}

func assertLinesInOrder(t *testing.T, text string, want []string) {
	t.Helper()
	lines := strings.Split(text, "\n")
	i := 0
	for _, w := range want {
		for i < len(lines) && lines[i] != w {
			i++
		}
		if i == len(lines) {
			t.Fatalf("missing or out of order: %q in\n%s", w, text)
		}
	}
}

func TestProxySpecsSorted(t *testing.T) {
	lbs := map[string]*model.LoadBalancer{
		"b/x":  {Key: "b/x", Listeners: []model.Listener{{Name: "b/x/tcp-1"}}},
		"a/x":  {Key: "a/x", Listeners: []model.Listener{{Name: "a/x/tcp-2"}, {Name: "a/x/tcp-1"}}},
		"gone": nil,
	}
	var got []string
	for _, ps := range proxySpecs(lbs) {
		got = append(got, ps.Listener.Name)
	}
	if strings.Join(got, " ") != "a/x/tcp-1 a/x/tcp-2 b/x/tcp-1" {
		t.Fatalf("order %v", got)
	}
}

func TestProbeMetadataRoundTrip(t *testing.T) {
	for _, p := range []model.Probe{
		{},
		{Kind: model.ProbeTCP, IntervalMillis: 2000, Rise: 2, Fall: 3},
		{Kind: model.ProbeHTTP, Port: 10256, Path: "/healthz?x=1&y=a b,c#d", IntervalMillis: 100, Rise: 1, Fall: 1},
	} {
		enc := encodeProbe(p)
		if strings.ContainsAny(enc, " ,#\n") {
			t.Errorf("encoded probe %q has a separator", enc)
		}
		got, err := decodeProbe(enc)
		if err != nil || got != p {
			t.Errorf("decodeProbe(encodeProbe(%+v)) = %+v, %v", p, got, err)
		}
	}
	if _, err := decodeProbe("inter=x"); err == nil {
		t.Error("bad number accepted")
	}
}

func TestCheckArgs(t *testing.T) {
	for _, tc := range []struct {
		p    model.Probe
		want string
	}{
		{model.Probe{}, "check inter 2000 fastinter 500 rise 2 fall 3"},
		{model.Probe{Kind: model.ProbeTCP, IntervalMillis: 500, Rise: 1, Fall: 5}, "check inter 500 fastinter 125 rise 1 fall 5"},
		{model.Probe{Kind: model.ProbeHTTP, Port: 31000, Path: "/healthz"}, "check inter 2000 rise 2 fall 3 port 31000"},
	} {
		if got := checkArgs(tc.p); got != tc.want {
			t.Errorf("checkArgs(%+v) = %q, want %q", tc.p, got, tc.want)
		}
	}
}
