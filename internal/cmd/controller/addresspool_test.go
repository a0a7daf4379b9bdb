package controller

import (
	"net/netip"
	"testing"

	"zerodrop.dev/zerodrop/internal/controller/service"
)

// TestDataPlaneStatusPool: a data-plane replica checks the Services' status
// addresses against --address-pool only when the flag is given — its default
// is the control role's allocation default, which a replica started without
// the flag never agreed to (the check would refuse every Service there).
func TestDataPlaneStatusPool(t *testing.T) {
	for _, tc := range []struct {
		args []string
		role service.Role
		want netip.Prefix
	}{
		{[]string{"--role=data-plane"}, service.RoleDataPlane, netip.Prefix{}},
		{[]string{"--role=data-plane", "--address-pool=192.0.2.0/24"}, service.RoleDataPlane, netip.MustParsePrefix("192.0.2.0/24")},
		{[]string{"--role=control"}, service.RoleControl, netip.MustParsePrefix("127.0.100.0/24")},
	} {
		cfg, err := ParseArgs(tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		var in Instance
		opts, err := in.serviceOptions(cfg, wiring{}, tc.role)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if opts.AddressPool != tc.want {
			t.Errorf("%v: the service controller's pool is %v, want %v", tc.args, opts.AddressPool, tc.want)
		}
	}
}
