package ccm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// The real aws-cloud-controller-manager of k8s.io/cloud-provider-aws
// against the AWS emulator (internal/emulated/awsapi): what TestRealAWSCCM
// runs, and what the AWS lab's upstream will. Like the Azure CCM above, it
// shares no code with zerodrop; it writes the cloud config a cluster
// outside AWS's metadata would give the CCM and starts the process.

// AWSBinary builds (or reuses from the cache) the aws-cloud-controller-manager
// of a release of k8s.io/cloud-provider-aws ("" is the script's default,
// v1.37.1, or what ZERODROP_CCM_AWS_VERSION names) and returns its path; on
// demand, by what runs it, as BinaryVersion does for Azure.
func AWSBinary(version string) (string, error) {
	return build("cloud-provider-aws", version)
}

// DefaultAWSVersion is hack/cloud-provider-aws.sh's default release.
const DefaultAWSVersion = "v1.37.1"

// AWSVersion is the release AWSBinary("") builds: ZERODROP_CCM_AWS_VERSION's,
// or DefaultAWSVersion.
func AWSVersion() string {
	if v := os.Getenv("ZERODROP_CCM_AWS_VERSION"); v != "" {
		return v
	}
	return DefaultAWSVersion
}

// AWSConfig is one AWS CCM process's setting.
type AWSConfig struct {
	Binary     string
	Dir        string // for its cloud config and log
	Kubeconfig string
	// Emulator is the AWS emulator as served on HTTPS: the one endpoint of
	// EC2 and ELB (classic and v2) in every [ServiceOverride], and the
	// authority its certificate chains to (AWS_CA_BUNDLE).
	Emulator *awsapi.Served
	// Region is the emulator's; Zone the cluster's zone (us-east-1a, say).
	Region, Zone string
	// VPC and Subnet are the cluster's: with them and ClusterID the CCM
	// builds a stand-in for its own instance instead of asking the
	// instance metadata for it (aws.go newAWSCloud2, v1.37.1).
	VPC, Subnet string
	// ClusterID is the kubernetes.io/cluster/<ClusterID> tag the CCM
	// looks for on instances, subnets and security groups.
	ClusterID string
	// IMDS is where the CCM's instance metadata client is pointed (the
	// ec2imds override); AWS_EC2_METADATA_DISABLED keeps it from calling
	// at all, so a listener there that is never reached shows that no
	// request went to 169.254.169.254 either. Required.
	IMDS string
	// LeaseNamespace holds the leader-election Lease; "" runs without
	// leader election.
	LeaseNamespace string
}

// awsServiceIDs are the SDK ServiceIDs the CCM's endpoint resolvers match
// an override's Service against (config.go, v1.37.1: ec2.ServiceID,
// elb.ServiceID, elbv2.ServiceID, kms.ServiceID). All point at the
// emulator, which serves EC2, ELBv2 and the classic ELB and refuses the
// other API versions (KMS), so that no call of any client leaves loopback.
var awsServiceIDs = []string{"EC2", "Elastic Load Balancing", "Elastic Load Balancing v2", "KMS"}

// CloudConfig is the CCM's gcfg cloud config: the region and zone given
// (no metadata lookup for them, aws.go getRegionFromMetadata), the VPC,
// subnet and cluster ID (no lookup of its own instance), the emulator as
// every service's endpoint and the IMDS URL as the metadata endpoint.
func (c AWSConfig) CloudConfig() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[Global]\nRegion = %s\nZone = %s\nVPC = %s\nSubnetID = %s\nKubernetesClusterID = %s\n",
		c.Region, c.Zone, c.VPC, c.Subnet, c.ClusterID)
	for i, svc := range awsServiceIDs {
		fmt.Fprintf(&b, "\n[ServiceOverride %q]\nService = %s\nRegion = %s\nURL = %s\nSigningRegion = %s\n",
			fmt.Sprint(i+1), svc, c.Region, c.Emulator.URL, c.Region)
	}
	// GetIMDSEndpointOpts matches on Service only (imds.ServiceID).
	fmt.Fprintf(&b, "\n[ServiceOverride %q]\nService = ec2imds\nRegion = %s\nURL = %s\nSigningRegion = %s\n",
		fmt.Sprint(len(awsServiceIDs)+1), c.Region, c.IMDS, c.Region)
	return b.String()
}

// AWSEnv is the CCM's environment besides this process's: the emulator's
// fixed key, its authority, and instance metadata switched off. Proxy
// settings are dropped: every endpoint is on loopback.
func (c AWSConfig) AWSEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "AWS_PROFILE", "AWS_CONFIG_FILE",
			"AWS_SHARED_CREDENTIALS_FILE", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE":
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"AWS_ACCESS_KEY_ID="+awsapi.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY="+awsapi.SecretAccessKey,
		"AWS_REGION="+c.Region,
		"AWS_CA_BUNDLE="+c.Emulator.CAFile,
		"AWS_EC2_METADATA_DISABLED=true",
		// No shared config or credentials file is read from this user's home.
		"AWS_CONFIG_FILE="+os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE="+os.DevNull,
	)
}

// StartAWS writes the cloud config and starts the process named name
// (its log: LogPath(c.Dir, name)); the caller stops it.
func StartAWS(c AWSConfig, name string) (*supervisor.Process, error) {
	if c.IMDS == "" {
		return nil, fmt.Errorf("aws ccm %s: no IMDS URL: the metadata client would default to 169.254.169.254", name)
	}
	cfgPath := filepath.Join(c.Dir, name+"-aws.conf")
	if err := os.WriteFile(cfgPath, []byte(c.CloudConfig()), 0o600); err != nil {
		return nil, fmt.Errorf("aws ccm %s: cloud config: %w", name, err)
	}
	args := []string{
		"--cloud-provider=aws", "--cloud-config=" + cfgPath, "--kubeconfig=" + c.Kubeconfig,
		"--authentication-kubeconfig=" + c.Kubeconfig, "--authorization-kubeconfig=" + c.Kubeconfig,
		"--controllers=service-lb-controller", "--cluster-name=" + c.ClusterID,
		"--secure-port=0", "--configure-cloud-routes=false", "--allocate-node-cidrs=false", "--v=2",
	}
	if c.LeaseNamespace != "" {
		args = append(args, "--leader-elect=true", "--leader-elect-resource-namespace="+c.LeaseNamespace)
	} else {
		args = append(args, "--leader-elect=false")
	}
	return supervisor.Start(supervisor.Spec{Name: c.Binary, Args: args, Env: c.AWSEnv(),
		Log: LogPath(c.Dir, name), DieWithParent: true})
}

// AWSCluster is a cluster's VPC as the CCM finds an internet-facing NLB's
// subnets and its nodes' instances in it: what TestRealAWSCCM and the AWS
// lab seed into the emulator (SeedAWS).
type AWSCluster struct {
	// ClusterID is the kubernetes.io/cluster/<ClusterID> tag's name.
	ClusterID, VPC string
	// CIDR is the VPC's range (its main route table's local route).
	CIDR string
	// Subnets get the VPC, the cluster tag (shared) and
	// kubernetes.io/role/elb: one public subnet per zone, as aws.go
	// findELBSubnets keeps them (v1.37.1).
	Subnets []awsapi.Subnet
	Nodes   []AWSNode
}

// AWSNode is a node of the cluster and the EC2 instance it runs on.
type AWSNode struct {
	Name, InstanceID, Zone, Subnet, IP string
}

// ProviderID is the node's spec.providerID as the CCM maps it to its
// instance (aws:///<zone>/<instance ID>).
func (n AWSNode) ProviderID() string { return "aws:///" + n.Zone + "/" + n.InstanceID }

// AWSNodesGroup is the nodes' security group, cluster-tagged (owned): the
// one whose rules the CCM manages for an NLB's node ports (aws.go
// findSecurityGroupForInstance).
const AWSNodesGroup = "sg-0nodes"

// SeedAWS seeds the cluster's VPC into emu: its subnets, a main route
// table reaching an internet gateway (the subnets public), the nodes'
// security group and one running instance per node, cluster-tagged.
func SeedAWS(emu *awsapi.Emulator, c AWSCluster) {
	tag := "kubernetes.io/cluster/" + c.ClusterID
	for _, s := range c.Subnets {
		s.VPCID, s.Tags = c.VPC, map[string]string{tag: "shared", "kubernetes.io/role/elb": "1"}
		emu.AddSubnet(s)
	}
	emu.AddRouteTable(awsapi.RouteTable{ID: "rtb-0main", VPCID: c.VPC, Main: true,
		Routes: []awsapi.Route{{DestinationCIDR: c.CIDR, GatewayID: "local"}, {DestinationCIDR: "0.0.0.0/0", GatewayID: "igw-0zerodrop"}}})
	emu.AddSecurityGroup(awsapi.SecurityGroup{ID: AWSNodesGroup, Name: "nodes", Description: "the cluster's nodes",
		VPCID: c.VPC, Tags: map[string]string{tag: "owned"}})
	for _, n := range c.Nodes {
		emu.AddInstance(awsapi.Instance{ID: n.InstanceID, PrivateIP: n.IP,
			PrivateDNSName: "ip-" + strings.ReplaceAll(n.IP, ".", "-") + ".ec2.internal",
			SubnetID:       n.Subnet, VPCID: c.VPC, AZ: n.Zone, SecurityGroups: []string{AWSNodesGroup},
			Tags: map[string]string{tag: "owned", "Name": n.Name}})
	}
}
