package controller

import (
	"context"
	"errors"
	"fmt"
	"github.com/spf13/pflag"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"zerodrop.dev/zerodrop/internal/provider/azure"
)

// AzureConfig is what `--provider azure` needs. Credentials are not flags:
// azidentity's DefaultAzureCredential finds them (environment, workload
// identity, managed identity, Azure CLI).
type AzureConfig struct {
	SubscriptionID string
	ResourceGroup  string
	// LoadBalancers is a comma-separated list of load balancer names in
	// ResourceGroup; Services are spread over them (azure.Provider.KeyFunc).
	LoadBalancers string
	SubnetID      string
	Location      string
	Owner         string
	Cloud         string
	// TryTimeout and PollTimeout are azure.Options': the deadline of each
	// try of an ARM request, and of the wait for a write ARM accepted.
	TryTimeout  time.Duration
	PollTimeout time.Duration
	// Read bounds the provider's ARM reads, every GET it causes
	// (--azure-read-qps, --azure-read-burst; zero: DefaultAzureRead).
	Read ReadLimit
	// RuleHealth, RuleHealthQPS and RuleHealthBurst are azure.Options'
	// RuleHealth, HealthQPS and HealthBurst: the gates' read-back of probe
	// health through ARM's rule-health operation, and its budget.
	RuleHealth      bool
	RuleHealthQPS   float64
	RuleHealthBurst int
	// GateOnlyLoadBalancers is a comma-separated list of load balancers in
	// ResourceGroup that another controller writes (the cloud's own), read
	// for the gates of gate-only Services and never written; empty: the
	// gate-only mode is off.
	GateOnlyLoadBalancers string

	// Credential and ClientOptions, when set by a caller of RunConfig,
	// replace the credential and ARM client options --azure-cloud chooses:
	// the lab runs this wiring in processes of their own against its ARM
	// emulator. They are not flags; the command leaves them nil.
	Credential    azcore.TokenCredential
	ClientOptions *arm.ClientOptions
	// PollFrequency, when set by a caller of RunConfig, is azure.Options':
	// how often a write ARM accepted is polled (default 1 s, the SDK's
	// minimum outside a test binary). Not a flag.
	PollFrequency time.Duration
}

// clouds are the values of --azure-cloud.
var clouds = map[string]cloud.Configuration{
	"public":       cloud.AzurePublic,
	"china":        cloud.AzureChina,
	"usgovernment": cloud.AzureGovernment,
}

func (a *AzureConfig) flags(fs *pflag.FlagSet) {
	fs.StringVar(&a.SubscriptionID, "azure-subscription-id", os.Getenv("AZURE_SUBSCRIPTION_ID"), "azure: subscription of the load balancers (default $AZURE_SUBSCRIPTION_ID)")
	fs.StringVar(&a.ResourceGroup, "azure-resource-group", "", "azure: resource group of the load balancers")
	fs.StringVar(&a.LoadBalancers, "azure-load-balancers", "", "azure: comma-separated Standard Load Balancer names Services are placed on (annotation "+
		azure.AnnotationLoadBalancer+" picks one; otherwise a Service stays where it is or is hashed onto one)")
	fs.StringVar(&a.SubnetID, "azure-subnet-id", "", "azure: subnet resource ID frontends take private addresses from (…/virtualNetworks/VNET/subnets/SUBNET); IP-based pools use its virtual network")
	fs.StringVar(&a.Location, "azure-location", "", "azure: region where a missing load balancer is created (e.g. westeurope)")
	fs.StringVar(&a.Owner, "azure-owner", "zerodrop", "azure: value of the load balancers' ownership tag "+azure.TagOwner+"; give each cluster its own")
	fs.StringVar(&a.Cloud, "azure-cloud", "public", "azure: public, china or usgovernment")
	fs.DurationVar(&a.TryTimeout, "azure-try-timeout", azure.DefaultTryTimeout, "azure: deadline of each try of an ARM request, each poll included; "+
		"a try past it is cancelled and retried like a failed connection (3 retries)")
	fs.DurationVar(&a.PollTimeout, "azure-poll-timeout", azure.DefaultPollTimeout, "azure: deadline of the wait for a write ARM has accepted "+
		"(its long-running operation); past it the sync fails and is retried")
	fs.BoolVar(&a.RuleHealth, "azure-rule-health", true, "azure: the gates read each backend's probe health with ARM's rule-health operation "+
		"(a readiness gate then waits for the probe Up, not only for the pool); false: pool membership only")
	fs.Float64Var(&a.RuleHealthQPS, "azure-rule-health-qps", azure.DefaultHealthQPS, "azure: rule-health operations started a second, sustained "+
		"(each a POST, metered with the subscription's ARM writes, 200 refilled at 10 a second, plus its polls); a rule's next read begins 5s after its last one began (at most 3 at once where an answer takes longer)")
	fs.IntVar(&a.RuleHealthBurst, "azure-rule-health-burst", azure.DefaultHealthBurst, "azure: rule-health operations that may start at once after a quiet spell")
	fs.StringVar(&a.GateOnlyLoadBalancers, "azure-gate-only-load-balancers", "", "azure: comma-separated load balancers another controller writes "+
		"(the cloud-controller-manager's, e.g. kubernetes-internal), read and never written: the pods of Services annotated "+
		"zerodrop.dev/gate-only=true get the gates, from the rule of the Service's ingress address and port there; empty: gate-only is off")
	a.Read.flags(fs, "azure", DefaultAzureRead, "each an ARM GET; the same budget bounds every other GET zerodrop sends ARM: the gates' reads, "+
		"each poll of a write's or a rule-health read's operation and its final GET, retries; all under Azure Resource Manager's read bucket of 250 refilled at 25 a second per principal, subscription and region, "+
		"and Microsoft.Network's 10,000 GETs per 5 minutes per subscription and region, shared with every other client there")
}

var (
	guidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	// ARM: 1–90 characters of letters, digits, '_', '-', '.', '(' and ')',
	// not ending in '.'.
	groupRE = regexp.MustCompile(`^[-\w.()]{0,89}[-\w()]$`)
	// ARM: 1–80 characters of letters, digits, '_', '.' and '-', starting
	// with a letter or digit, ending with a letter, digit or '_'.
	lbNameRE = regexp.MustCompile(`^[a-zA-Z0-9]([-\w.]{0,78}\w)?$`)
	subnetRE = regexp.MustCompile(`(?i)^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Network/virtualNetworks/[^/]+/subnets/[^/]+$`)
	// The ownership tag's value: Azure tag values hold at most 256 characters.
	ownerMax = 256
)

// names splits --azure-load-balancers.
func (a *AzureConfig) names() []string { return splitNames(a.LoadBalancers) }

// gateOnlyNames splits --azure-gate-only-load-balancers.
func (a *AzureConfig) gateOnlyNames() []string { return splitNames(a.GateOnlyLoadBalancers) }

func splitNames(list string) []string {
	var out []string
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// validate checks the Azure flags without calling Azure, so that a typo
// fails at once and names the flag instead of surfacing as an ARM error.
func (a *AzureConfig) validate() error {
	var errs []error
	if a.SubscriptionID == "" {
		errs = append(errs, errors.New("--azure-subscription-id (or $AZURE_SUBSCRIPTION_ID) is required"))
	} else if !guidRE.MatchString(a.SubscriptionID) {
		errs = append(errs, fmt.Errorf("--azure-subscription-id %q is not a subscription ID (a GUID)", a.SubscriptionID))
	}
	if a.ResourceGroup == "" {
		errs = append(errs, errors.New("--azure-resource-group is required"))
	} else if !groupRE.MatchString(a.ResourceGroup) {
		errs = append(errs, fmt.Errorf("--azure-resource-group %q is not a resource group name", a.ResourceGroup))
	}
	names := a.names()
	if len(names) == 0 {
		errs = append(errs, errors.New("--azure-load-balancers needs at least one load balancer name"))
	}
	seen := map[string]bool{}
	for _, n := range names {
		// ARM names are case-insensitive: two spellings are one load balancer
		// and would be two work items (two writers).
		if seen[strings.ToLower(n)] {
			errs = append(errs, fmt.Errorf("--azure-load-balancers names %q twice", n))
		}
		seen[strings.ToLower(n)] = true
		if !lbNameRE.MatchString(n) {
			errs = append(errs, fmt.Errorf("--azure-load-balancers: %q is not a load balancer name (1–80 letters, digits, '_', '.', '-')", n))
		}
	}
	for _, n := range a.gateOnlyNames() {
		if !lbNameRE.MatchString(n) {
			errs = append(errs, fmt.Errorf("--azure-gate-only-load-balancers: %q is not a load balancer name (1–80 letters, digits, '_', '.', '-')", n))
		}
	}
	if a.SubnetID == "" {
		errs = append(errs, errors.New("--azure-subnet-id is required"))
	} else if !subnetRE.MatchString(a.SubnetID) {
		errs = append(errs, fmt.Errorf("--azure-subnet-id %q is not /subscriptions/SUB/resourceGroups/RG/providers/Microsoft.Network/virtualNetworks/VNET/subnets/SUBNET", a.SubnetID))
	}
	if a.Location == "" {
		errs = append(errs, errors.New("--azure-location is required (where a missing load balancer is created)"))
	}
	if a.Owner == "" || len(a.Owner) > ownerMax {
		errs = append(errs, fmt.Errorf("--azure-owner must have 1–%d characters", ownerMax))
	}
	if _, ok := clouds[a.Cloud]; !ok {
		errs = append(errs, fmt.Errorf("--azure-cloud %q: want public, china or usgovernment", a.Cloud))
	}
	if a.TryTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--azure-try-timeout %s must be positive", a.TryTimeout))
	}
	if a.PollTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--azure-poll-timeout %s must be positive", a.PollTimeout))
	}
	if err := a.Read.validate("azure"); err != nil {
		errs = append(errs, err)
	}
	if a.RuleHealth && (a.RuleHealthQPS <= 0 || a.RuleHealthBurst <= 0) {
		errs = append(errs, fmt.Errorf("--azure-rule-health-qps %g and --azure-rule-health-burst %d must be positive", a.RuleHealthQPS, a.RuleHealthBurst))
	}
	return errors.Join(errs...)
}

// options turns validated flags into the provider's options. A cloud other
// than the public one needs the credential to authenticate there too.
func (a *AzureConfig) options() (azure.Options, error) {
	opts := azure.Options{
		SubscriptionID: a.SubscriptionID, ResourceGroup: a.ResourceGroup, LoadBalancers: a.names(),
		SubnetID: a.SubnetID, Location: a.Location, Owner: a.Owner,
		TryTimeout: a.TryTimeout, PollTimeout: a.PollTimeout, PollFrequency: a.PollFrequency,
		RuleHealth: a.RuleHealth, HealthQPS: a.RuleHealthQPS, HealthBurst: a.RuleHealthBurst,
		GateOnlyLoadBalancers: a.gateOnlyNames(),
	}
	// The read limit bounds every ARM GET the provider causes (its SDK
	// pipeline's budget, the polls of writes included), not only the
	// Service controller's reads, which it also bounds (serviceOptions).
	read := a.Read.orDefault(DefaultAzureRead)
	opts.ReadQPS, opts.ReadBurst = read.QPS, read.Burst
	if a.Credential != nil || a.ClientOptions != nil {
		opts.Credential, opts.ClientOptions = a.Credential, a.ClientOptions
		return opts, nil
	}
	if a.Cloud != "public" {
		c := clouds[a.Cloud]
		cred, err := azidentity.NewDefaultAzureCredential(&azidentity.DefaultAzureCredentialOptions{
			ClientOptions: azcore.ClientOptions{Cloud: c},
		})
		if err != nil {
			return opts, fmt.Errorf("azure credential for cloud %s: %w", a.Cloud, err)
		}
		opts.Credential = cred
		opts.ClientOptions = &arm.ClientOptions{ClientOptions: policy.ClientOptions{Cloud: c}}
	}
	return opts, nil
}

// newAzure connects the provider; New reads every configured load balancer
// once, so a wrong name or missing permission fails here.
func newAzure(ctx context.Context, a AzureConfig, opts azure.Options) (*azure.Provider, error) {
	p, err := azure.New(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("start azure provider (subscription %s, resource group %s): %w", a.SubscriptionID, a.ResourceGroup, err)
	}
	return p, nil
}
