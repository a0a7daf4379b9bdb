package haproxy

import "testing"

func TestProxyName(t *testing.T) {
	for _, tc := range []struct {
		key, listener, want string
	}{
		{"default/web", "default/web/tcp-80", "zd:default.web:tcp-80"},
		{"kube-system/dns", "kube-system/dns/tcp-53", "zd:kube-system.dns:tcp-53"},
		// A listener not named after its key (a shared load balancer).
		{"shared-lb", "team-a/api/tcp-443", "zd:shared-lb::team-a.api.tcp-443"},
		// Characters HAProxy refuses, and the escape characters themselves.
		{"a.b/c_d", "a.b/c_d/x:y z", "zd:a_2eb.c_5fd:x_3ay_20z"},
		{"ns/n", "ns/n/", "zd:ns.n::ns.n."},
		{"ns/n", "other", "zd:ns.n::other"},
		{"UPPER/Case", "UPPER/Case/TCP-1", "zd:UPPER.Case:TCP-1"},
	} {
		got := proxyName(tc.key, tc.listener)
		if got != tc.want {
			t.Errorf("proxyName(%q, %q) = %q, want %q", tc.key, tc.listener, got, tc.want)
		}
		key, listener, ok := parseProxyName(got)
		if !ok || key != tc.key || listener != tc.listener {
			t.Errorf("parseProxyName(%q) = %q, %q, %v; want %q, %q", got, key, listener, ok, tc.key, tc.listener)
		}
	}
}

func TestParseProxyNameRejects(t *testing.T) {
	for _, name := range []string{
		"web", "zd-meta", "zd:", "zd::x", "zd:key", "zd:key:", "zd:key::", "zd:a_zz:b", "zd:a_2:b", "zd:a b:c",
	} {
		if k, l, ok := parseProxyName(name); ok {
			t.Errorf("parseProxyName(%q) = %q, %q, true; want not ours", name, k, l)
		}
	}
}

func TestServerName(t *testing.T) {
	for _, tc := range []struct {
		addr string
		port int32
		want string
	}{
		{"127.0.0.1", 8080, "127.0.0.1:8080"},
		{"10.244.1.17", 80, "10.244.1.17:80"},
		{"::1", 443, "::1:443"},
		{"fe80::1%eth0", 1, "fe80::1_25eth0:1"},
	} {
		got := serverName(tc.addr, tc.port)
		if got != tc.want {
			t.Errorf("serverName(%q, %d) = %q, want %q", tc.addr, tc.port, got, tc.want)
		}
		addr, port, err := parseServerName(got)
		if err != nil || addr != tc.addr || port != tc.port {
			t.Errorf("parseServerName(%q) = %q, %d, %v", got, addr, port, err)
		}
	}
	for _, bad := range []string{"noport", ":80", "1.2.3.4:x", "1.2.3.4:99999", "a_2:1"} {
		if _, _, err := parseServerName(bad); err == nil {
			t.Errorf("parseServerName(%q) accepted", bad)
		}
	}
}

func TestHostPort(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.50": "127.0.0.50:80",
		"::1":        "ipv6@::1:80",
	} {
		if got := hostPort(addr, 80); got != want {
			t.Errorf("hostPort(%q) = %q, want %q", addr, got, want)
		}
	}
}
