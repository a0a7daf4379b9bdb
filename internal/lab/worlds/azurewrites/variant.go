package azurewrites

import (
	"fmt"
	"io"
)

// Variant is what --dry-run says of the world's options for the command's
// flags, with the defaults the run would fill in.
func Variant(f CommandFlags) (string, error) {
	opts, err := withAzureDefaults(AzureOptions{Progress: io.Discard, FaultRate: f.FaultRate, Kills: f.Kills,
		IdleRestarts: f.IdleRestarts, CCMLoadBalancers: f.CCMLoadBalancers, IdleChange: f.IdleChange})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("fault rate %g, CCM load balancers %s, %d Services, restarts %d, idle restarts %d of %d Services (change: %s), churn %s of %d Services, kills %d",
		opts.FaultRate, opts.CCMLoadBalancers, opts.Services, opts.Restarts, opts.IdleRestarts, opts.IdleServices, opts.IdleChange,
		opts.ChurnDuration, opts.ChurnServices, opts.Kills), nil
}
