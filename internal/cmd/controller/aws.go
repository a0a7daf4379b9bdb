package controller

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/spf13/pflag"

	zdaws "zerodrop.dev/zerodrop/internal/provider/aws"
)

// AWSConfig is what `--provider aws` needs: the gates of gate-only
// Services on the NLBs cloud-provider-aws writes, read and never written.
// Credentials are not flags: the SDK's default chain finds them
// (environment, shared files, IRSA's web identity, the EKS pod identity
// agent, instance metadata), and IAM needs only
// elasticloadbalancing:Describe* on them.
type AWSConfig struct {
	Region string
	// Endpoint overrides the ELBv2 endpoint (an emulator, a VPC endpoint).
	Endpoint string
	// ClusterID is the CCM's cluster tag kubernetes.io/cluster/<ID> the NLBs
	// must carry ("" : any cluster's tag).
	ClusterID string
	// QPS and Burst bound every AWS call zerodrop makes.
	QPS   float64
	Burst int
	// HealthMaxAge, LookupMaxAge and Propagation are zdaws.Options'.
	HealthMaxAge, LookupMaxAge, Propagation time.Duration

	// Config, when set by a caller of RunConfig, replaces the SDK's default
	// configuration (the lab and the tests: the emulator's credentials and
	// HTTP client). Not a flag.
	Config *aws.Config
}

func (a *AWSConfig) flags(fs *pflag.FlagSet) {
	fs.StringVar(&a.Region, "aws-region", "", "aws: region of the cluster's NLBs (default: the SDK's, $AWS_REGION)")
	fs.StringVar(&a.Endpoint, "aws-endpoint", "", "aws: ELBv2 endpoint URL instead of the region's (a VPC endpoint, an emulator)")
	fs.StringVar(&a.ClusterID, "aws-cluster-id", "", "aws: the cluster tag kubernetes.io/cluster/<ID> cloud-provider-aws puts on its NLBs; "+
		"an NLB without it is not read (empty: any cluster's tag)")
	fs.Float64Var(&a.QPS, "aws-qps", zdaws.DefaultQPS, "aws: ELBv2 Describe calls a second, sustained, for all the gates "+
		"(the account's Describe budget, 40 at once refilled at 10 a second, is shared with cloud-provider-aws and every other client: "+
		"the default takes a fifth of the refill); past it the gates read older answers")
	fs.IntVar(&a.Burst, "aws-burst", zdaws.DefaultBurst, "aws: Describe calls that may go at once after a quiet spell")
	fs.DurationVar(&a.HealthMaxAge, "aws-health-max-age", zdaws.DefaultHealthMaxAge, "aws: a target group's DescribeTargetHealth answer "+
		"serves every gate asking for this long; read again after (one read per target group, shared by its pods)")
	fs.DurationVar(&a.LookupMaxAge, "aws-lookup-max-age", zdaws.DefaultLookupMaxAge, "aws: what was found of a Service's NLB "+
		"(load balancer, listeners, target groups: four calls) is looked up again after this long")
	fs.DurationVar(&a.Propagation, "aws-propagation", zdaws.DefaultPropagation, "aws: how long the NLB's data plane may still send new "+
		"connections to a target after DescribeTargetHealth reports it unhealthy or draining (30-40 s in aws/containers-roadmap#470, "+
		"a field report; AWS documents none): the termination gate of a Local Service's last pod on a node waits this long past it")
}

// validate checks the AWS flags without calling AWS.
func (a *AWSConfig) validate() error {
	var errs []error
	if a.Endpoint != "" {
		if u, err := url.Parse(a.Endpoint); err != nil || u.Scheme == "" || u.Host == "" {
			errs = append(errs, fmt.Errorf("--aws-endpoint %q is not a URL", a.Endpoint))
		}
	}
	if a.QPS <= 0 || a.Burst <= 0 {
		errs = append(errs, fmt.Errorf("--aws-qps %g and --aws-burst %d must be positive", a.QPS, a.Burst))
	}
	if a.HealthMaxAge <= 0 || a.LookupMaxAge <= 0 {
		errs = append(errs, fmt.Errorf("--aws-health-max-age %s and --aws-lookup-max-age %s must be positive", a.HealthMaxAge, a.LookupMaxAge))
	}
	if a.Propagation < 0 {
		errs = append(errs, fmt.Errorf("--aws-propagation %s must be at least 0", a.Propagation))
	}
	return errors.Join(errs...)
}

// newAWS makes the read-only provider: an ELBv2 client from the SDK's
// default configuration (or the caller's Config) seen as zdaws.API. The
// SDK's retries are off: every call is one request against the budget,
// and the gates look again anyway.
func newAWS(ctx context.Context, a AWSConfig, opts zdaws.Options) (*zdaws.Provider, error) {
	var cfg aws.Config
	if a.Config != nil {
		cfg = a.Config.Copy()
	} else {
		var err error
		if cfg, err = awsconfig.LoadDefaultConfig(ctx); err != nil {
			return nil, fmt.Errorf("aws configuration: %w", err)
		}
	}
	if a.Region != "" {
		cfg.Region = a.Region
	}
	if cfg.Region == "" {
		return nil, errors.New("aws: no region (--aws-region or $AWS_REGION)")
	}
	cfg.RetryMaxAttempts = 1
	client := elbv2.NewFromConfig(cfg, func(o *elbv2.Options) {
		if a.Endpoint != "" {
			o.BaseEndpoint = aws.String(a.Endpoint)
		}
	})
	opts.API = client
	opts.ClusterID, opts.QPS, opts.Burst = a.ClusterID, a.QPS, a.Burst
	opts.HealthMaxAge, opts.LookupMaxAge = a.HealthMaxAge, a.LookupMaxAge
	// --aws-propagation 0 means none: the provider's zero is its default.
	opts.Propagation = a.Propagation
	if opts.Propagation == 0 {
		opts.Propagation = time.Nanosecond
	}
	p, err := zdaws.New(opts)
	if err != nil {
		return nil, fmt.Errorf("start aws provider: %w", err)
	}
	return p, nil
}
