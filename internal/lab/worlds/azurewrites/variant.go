package azurewrites

import "fmt"

// Variant is what --dry-run says of the world's options, with the defaults
// a run would fill in.
func Variant(opts AzureOptions) (string, error) {
	opts, err := withAzureDefaults(opts)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("fault rate %g, CCM load balancers %s, %d Services, restarts %d, idle restarts %d of %d Services (change: %s), churn %s of %d Services, kills %d",
		opts.FaultRate, opts.CCMLoadBalancers, opts.Services, opts.Restarts, opts.IdleRestarts, opts.IdleServices, opts.IdleChange,
		opts.ChurnDuration, opts.ChurnServices, opts.Kills), nil
}
