package install

import (
	"io"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/cmd/speaker"
)

// TestChartSpeakerAddressLink: by default the speaker puts the Service
// addresses on its own link (zerodrop0, read back with the command's
// parser) and its container alone gets NET_ADMIN for it (still dropping
// every other capability); haproxy.bgp.addressLink empty turns both off.
func TestChartSpeakerAddressLink(t *testing.T) {
	for _, tc := range []struct {
		set      []string
		link     string
		netAdmin bool
	}{
		{nil, "zerodrop0", true},
		{[]string{"haproxy.bgp.addressLink=zl9"}, "zl9", true},
		{[]string{"haproxy.bgp.addressLink="}, "", false},
	} {
		objs := render(t, slices.Concat(haproxyValues, bgpValues, tc.set)...)
		spec := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "zerodrop-speaker")).Spec.Template.Spec
		if len(spec.Containers) != 1 {
			t.Fatalf("%v: %d containers, want the speaker alone", tc.set, len(spec.Containers))
		}
		c := spec.Containers[0]
		t.Setenv("NODE_NAME", "node-a")
		t.Setenv("HOST_IP", "192.0.2.10")
		var args []string
		for _, a := range c.Args[1:] {
			if a != "--peer-password-file=/run/zerodrop/bgp/password" {
				args = append(args, a)
			}
		}
		cfg, err := speaker.Parse(args, io.Discard)
		if err != nil {
			t.Fatalf("%v: speaker args %q: %v", tc.set, c.Args, err)
		}
		if cfg.AddressLink != tc.link {
			t.Errorf("%v: address link %q, want %q", tc.set, cfg.AddressLink, tc.link)
		}
		caps := c.SecurityContext.Capabilities
		if caps == nil || !slices.Equal(caps.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("%v: capabilities %+v, want every one dropped", tc.set, caps)
			continue
		}
		if got := slices.Contains(caps.Add, "NET_ADMIN"); got != tc.netAdmin || len(caps.Add) > 1 {
			t.Errorf("%v: capabilities added %v, want NET_ADMIN %t and nothing else", tc.set, caps.Add, tc.netAdmin)
		}
	}
}
