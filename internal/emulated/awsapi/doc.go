// Package awsapi is an in-memory ELBv2 and EC2 for one account and
// region, served over HTTPS on loopback with the AWS query protocols and
// Signature Version 4, for the real cloud-provider-aws to manage Network
// Load Balancers against in the lab. It keeps target health as AWS's time
// goes (targethealth.go: registration delay, health check thresholds,
// draining for the deregistration delay, fail-open, propagation), records
// every call (Calls, WritesByOperation), and injects throttling
// (Throttle). It is for tests and the lab only.
//
// # What cloud-provider-aws v1.37.1 calls
//
// Read from k8s.io/cloud-provider-aws v1.37.1 (module zip), files under
// pkg/providers/v1. SDK: aws-sdk-go-v2 only (go.mod:7 aws-sdk-go-v2
// v1.41.1, :13 service/elasticloadbalancingv2 v1.45.2, :80 service/ec2
// v1.249.0), so the wire is v2's: ELBv2 awsquery (form POST, Version
// 2015-12-01, lists as Name.member.N, XML <OpResult>, errors
// <ErrorResponse><Error><Type/><Code/>), EC2 ec2query (Version 2016-11-15,
// lists as Name.N, camelCase members with <item>, errors
// <Response><Errors><Error><Code/>). The CCM retries on the SDK's
// standard retryer and treats RequestLimitExceeded specially
// (retry_handler.go:191).
//
// For a Service of type LoadBalancer with
// service.beta.kubernetes.io/aws-load-balancer-type: nlb (instance
// targets), EnsureLoadBalancer (aws.go:2362; UpdateLoadBalancer,
// aws.go:3401, checks the NLB exists and calls it again) makes, in order:
//
//   - Nodes to instances: findInstancesForELB (aws_loadbalancer.go:1805)
//     maps each Node's providerID to an instance ID and reads every
//     instance through the instance cache (10 min, refreshed when an ID is
//     missing): EC2 DescribeInstances with no filter and MaxResults 1000,
//     paged by NextToken (instances.go:159, aws.go:3543, aws_ec2.go:57-89),
//     keeping those with the kubernetes.io/cluster/<id> tag
//     (tags.go:137). The node controller's lookups are DescribeInstances
//     by InstanceId.N (batched, describe_instance_batch.go:112-130,
//     aws.go:3479) and by Filter private-dns-name + instance-state-name
//     (aws.go:3506-3540, 3610-3630; live states pending … stopped, aws.go:3600).
//   - Subnets: getLoadBalancerSubnets → findELBSubnets (aws.go:1687):
//     EC2 DescribeSubnets Filter vpc-id, keeping subnets with the cluster
//     tag or no cluster tag at all (aws.go:1648-1685; falling back to
//     Filter subnet-id of its own subnet), DescribeRouteTables Filter
//     vpc-id to keep public subnets (a route to an igw-… gateway, the main
//     table when a subnet has no association; aws.go:1694-1700, 1882-1926),
//     one subnet per AZ (tie-break on kubernetes.io/role/elb or
//     kubernetes.io/role/internal-elb, aws.go:1703-1770), then DescribeAvailabilityZones
//     once to drop non-"availability-zone" zones (zones.go:107-131). With
//     the aws-load-balancer-subnets annotation: DescribeSubnets by
//     SubnetId.N / Filter tag:Name, vpc-id instead (aws.go:1815-1880).
//   - ELBv2 DescribeLoadBalancers Names=[a<uid>] (aws.go:1195-1216;
//     LoadBalancerNotFound means "create").
//   - Security group of the NLB: only with NLBSecurityGroupMode=Managed
//     (off by default, config/config.go:222-236; aws.go:2277-2331): EC2
//     DescribeSecurityGroups Filter group-name + vpc-id, CreateTags to
//     repair missing cluster tags, or CreateSecurityGroup with
//     TagSpecification (InvalidGroup.Duplicate is retried; aws.go:1552-1633),
//     then AuthorizeSecurityGroupIngress for the listener ports and ICMP
//     3-4 (aws.go:2342-2360, 2040-2059).
//   - ensureLoadBalancerv2 (aws_loadbalancer.go:149). Creating:
//     CreateLoadBalancer (Type network, SubnetMappings, SecurityGroups, the
//     cluster and kubernetes.io/service-name tags; :203), per port
//     createListenerV2 (:707) = ensureTargetGroup (:771): CreateTargetGroup
//     (instance targets, port = node port, health check per policy, the
//     same tags; :805) then RegisterTargets Id+Port in chunks of 100
//     (:879-915), then CreateListener TCP → forward (:750); then
//     reconcileLBAttributes (:444): DescribeLoadBalancerAttributes and
//     ModifyLoadBalancerAttributes only for keys that differ
//     (load_balancing.cross_zone.enabled, access_logs.s3.*; :483, :526).
//     Existing: SetSecurityGroups if the set differs (:230),
//     DescribeListeners (:243), DescribeTargetGroups LoadBalancerArn
//     (:261); per port either a new target group + ModifyListener +
//     DeleteTargetGroup of the old when the target protocol, health check
//     protocol or interval changed (:307-366), or ensureTargetGroup on the
//     existing one: DescribeTargetHealth (:924; targets with reason
//     Target.DeregistrationInProgress ignored, :920-937), DeregisterTargets then
//     RegisterTargets for the difference (:889, :901), ModifyTargetGroup
//     when the health check port, threshold or path differs (:833-864;
//     the path is compared with the request's own nil field, :850, so an
//     HTTP health check — every Local Service — gets ModifyTargetGroup on
//     every sync) and DescribeTargetGroups by ARN after it (:867);
//     DeleteListener + DeleteTargetGroup for removed ports (:758-766);
//     reconcileLBAttributes; DescribeLoadBalancers by ARN when anything was
//     touched (:418-430, and every existing listener counts as touched, :381).
//     With the target-group-attributes annotation only:
//     DescribeTargetGroups + DescribeTargetGroupAttributes +
//     ModifyTargetGroupAttributes (:551-619; never
//     deregistration_delay.timeout_seconds, so AWS's 300 s stays).
//   - EC2 DescribeSubnets SubnetId.N of the NLB's zones for their CIDRs
//     (aws.go:2136).
//   - updateInstanceSecurityGroupsForNLB (aws_loadbalancer.go:977): EC2
//     DescribeSecurityGroups with no filter, keeping cluster-tagged groups
//     (aws.go:2958), DescribeSecurityGroups GroupId.N for each change
//     (aws.go:1253), AuthorizeSecurityGroupIngress /
//     RevokeSecurityGroupIngress of the node group's rules described
//     kubernetes.io/rule/nlb/client=<lb> (node ports from the client CIDRs)
//     and …/health=<lb> (health check ports from the subnets' CIDRs; left
//     out when the client rule already covers them: 0.0.0.0/0, TCP, same
//     ports) and …/mtu (ICMP 3-4; :1118) (aws.go:1430-1550).
//
// Local and Cluster differ only in the health check
// (buildNLBHealthCheckConfiguration, aws.go:2178-2260): Local HTTP
// /healthz on the healthCheckNodePort, interval 10 s, timeout 10 s,
// thresholds 2 (aws.go:2188-2198); Cluster TCP to the traffic port
// ("traffic-port"), interval 30 s, timeout 10 s, thresholds 3
// (aws_loadbalancer.go:66-74), unless ClusterServiceLoadBalancerHealthProbeMode
// is Shared (HTTP /healthz on kube-proxy's 10256, aws.go:2216-2234).
// EnsureLoadBalancerDeleted (aws.go:3280-3345): DescribeLoadBalancers,
// DescribeTargetGroups LoadBalancerArn, DeleteLoadBalancer,
// DeleteTargetGroup each, the node rules revoked as above, and
// DeleteSecurityGroup of owned groups with backoff (aws.go:3122).
//
// Served here: all of the above; ELBv2 AddTags, RemoveTags and
// DescribeTags besides (in the CCM's interface, aws.go:355, not on the NLB
// path). The classic ELB API (version 2012-06-01), what the CCM calls
// for a Service without the NLB annotation: elb.go, elb_policies.go.
// Not served: KMS, STS, IMDS, and EC2's
// node- and route-controller calls (DescribeVpcs, DescribeNetworkInterfaces,
// DescribeInstanceTopology, Create/DeleteRoute, ModifyInstanceAttribute).
package awsapi
