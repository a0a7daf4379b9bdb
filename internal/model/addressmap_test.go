package model

import "testing"

func TestAddressMap(t *testing.T) {
	m, err := ParseAddressMap("198.18.0.0/15=127.18.0.0/15, 10.0.0.0/8=127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		"198.18.0.7":   "127.18.0.7",
		"198.19.4.5":   "127.19.4.5",
		"10.1.2.3":     "127.1.2.3",
		"192.168.1.1":  "192.168.1.1",
		"not-an-ip":    "not-an-ip",
		"2001:db8::1":  "2001:db8::1",
		"198.17.255.1": "198.17.255.1",
	} {
		if got := MapAddress(m, in); got != want {
			t.Errorf("MapAddress(%s) = %s, want %s", in, got, want)
		}
	}
	for _, bad := range []string{"198.18.0.0/15", "198.18.0.0/15=127.0.0.0/8", "x=y", "10.0.0.0/8=::1/8"} {
		if _, err := ParseAddressMap(bad); err == nil {
			t.Errorf("ParseAddressMap(%q): no error", bad)
		}
	}
}
