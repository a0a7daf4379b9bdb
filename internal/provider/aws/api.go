// Package aws reads, and only reads, the Network Load Balancers that
// cloud-provider-aws (the cloud-controller-manager) writes for Services,
// for the gates of gate-only Services (model.AnnotationGateOnly): zerodrop
// never writes AWS. It finds a Service's NLB by the CCM's name and tags,
// the listener of a Service port, its target group and the target group's
// registered instances and their health (DescribeTargetHealth), polled once
// per target group and shared by every pod that asks, within a request
// budget. See docs/aws.md, "Gates on the cloud controller's NLBs
// (gate-only)".
package aws

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
)

// API is every call the provider makes: Describe operations of ELBv2, and
// nothing else. The provider holds only this interface, so that a write to
// AWS cannot be made from it without changing it (TestAPIOnlyDescribes
// fails on any method not named Describe*). *elasticloadbalancingv2.Client
// implements it.
type API interface {
	DescribeLoadBalancers(ctx context.Context, in *elasticloadbalancingv2.DescribeLoadBalancersInput,
		opts ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeLoadBalancersOutput, error)
	DescribeTags(ctx context.Context, in *elasticloadbalancingv2.DescribeTagsInput,
		opts ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeTagsOutput, error)
	DescribeListeners(ctx context.Context, in *elasticloadbalancingv2.DescribeListenersInput,
		opts ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeListenersOutput, error)
	DescribeTargetGroups(ctx context.Context, in *elasticloadbalancingv2.DescribeTargetGroupsInput,
		opts ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeTargetGroupsOutput, error)
	DescribeTargetHealth(ctx context.Context, in *elasticloadbalancingv2.DescribeTargetHealthInput,
		opts ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeTargetHealthOutput, error)
}

var _ API = (*elasticloadbalancingv2.Client)(nil)
