package controller

import (
	"testing"

	"zerodrop.dev/zerodrop/internal/provider/azure"
)

// TestAzureReadLimitReachesTheProvider: --azure-read-qps and
// --azure-read-burst are the Azure provider's read budget too (every ARM
// GET it causes, the SDK's polls included: azure.Options.ReadQPS), not only
// the Service controller's; zero is the default, which is the provider's
// own.
func TestAzureReadLimitReachesTheProvider(t *testing.T) {
	cases := []struct {
		desc  string
		args  []string
		qps   float64
		burst int
	}{
		{"default", azureArgs(nil), 10, 100},
		{"flags", azureArgs(map[string]string{"azure-read-qps": "2.5", "azure-read-burst": "7"}), 2.5, 7},
		{"zero is the default", azureArgs(map[string]string{"azure-read-qps": "0", "azure-read-burst": "0"}), 10, 100},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := parse(t, tc.args)
			opts, err := cfg.Azure.options()
			if err != nil {
				t.Fatal(err)
			}
			if opts.ReadQPS != tc.qps || opts.ReadBurst != tc.burst {
				t.Fatalf("provider read budget %g a second, burst %d; want %g, %d", opts.ReadQPS, opts.ReadBurst, tc.qps, tc.burst)
			}
		})
	}
	// The command's default and the provider's are one.
	if DefaultAzureRead.QPS != azure.DefaultReadQPS || DefaultAzureRead.Burst != azure.DefaultReadBurst {
		t.Fatalf("--azure-read-qps default %+v, the provider's %g, %d", DefaultAzureRead, azure.DefaultReadQPS, azure.DefaultReadBurst)
	}
}
