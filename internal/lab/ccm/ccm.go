// Package ccm runs the real cloud-controller-managers against the emulated
// clouds: cloud-provider-azure's (sigs.k8s.io/cloud-provider-azure, built by
// hack/cloud-provider-azure.sh) against the ARM emulator, the `upstream`
// writer of the Azure lab; and cloud-provider-aws's (k8s.io/cloud-provider-aws,
// built by hack/cloud-provider-aws.sh; aws.go) against the ELBv2 and EC2
// emulator. Each is the client that keeps its emulator honest in make test.
// It shares no code with zerodrop's controller or its providers; it only
// writes the configuration a self-managed cluster would give a CCM and starts
// the process.
package ccm

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"zerodrop.dev/zerodrop/internal/controlplane"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// The releases of sigs.k8s.io/cloud-provider-azure the lab knows: the
// default (hack/cloud-provider-azure.sh's too), and a release of the minor
// the #10224 incident's cluster ran (Kubernetes 1.33), the one issue 48
// names.
const (
	DefaultVersion = "v1.36.3"
	Version133     = "v1.33.2"
)

// BinaryVersion builds (or reuses from the cache) the cloud-controller-manager
// of a release of sigs.k8s.io/cloud-provider-azure (a tag, v1.33.2 say; "" is
// DefaultVersion, or what ZERODROP_CCM_AZURE_VERSION names), each release
// into a cache directory of its own, and returns its path. It is built on
// demand, by what runs it (a lab run whose world has the CCM write,
// TestRealCCM), not by `make lab`: the HAProxy lab never runs it. The build
// (hack/cloud-provider-azure.sh, minutes on a cold cache) shows its progress
// on stderr; a second caller waits on its lock.
func BinaryVersion(version string) (string, error) {
	return build("cloud-provider-azure", version)
}

// build runs hack/<name>.sh for a release (its default for "") and returns
// the path of the binary it built or found in the cache.
func build(name, version string) (string, error) {
	var args []string
	if version != "" {
		args = append(args, version)
	}
	bin, err := controlplane.Build(name+".sh", args...)
	if err != nil {
		return "", fmt.Errorf("build %s %s: %w", name, version, err)
	}
	return bin, nil
}

// Config is one CCM process's setting.
type Config struct {
	Binary     string
	Dir        string // for its cloud config and log
	Kubeconfig string
	// Emulator is the ARM emulator as served on HTTPS: its URL and the
	// authority its certificate chains to.
	Emulator *azurearm.Served
	// Identity names the process in the emulator's record: the secret of
	// its managed-identity endpoint, which the emulator's token carries.
	Identity string
	Resources
	// ClusterName names the load balancer (kubernetes, kubernetes-internal).
	ClusterName string
	// LeaseNamespace holds the leader-election Lease; "" runs without
	// leader election.
	LeaseNamespace string
	// LeaseDuration, when set, is the Lease's duration (renew deadline
	// two thirds of it, retry period a sixth); zero keeps the CCM's 15 s.
	// A stopped leader does not release its Lease (k8s.io/cloud-provider's
	// leaderElectAndRun sets no ReleaseOnCancel), so its successor waits
	// this long before it syncs.
	LeaseDuration time.Duration
	// Extra is merged into the cloud config (multipleStandardLoadBalancerConfigurations, say);
	// a nil value removes the key, leaving the CCM's default (vmType nil:
	// vmss; loadBalancerBackendPoolConfigurationType nil: nodeIPConfiguration).
	Extra map[string]any
}

// Resources are the cluster's Azure resources, as the emulator holds them.
type Resources struct {
	SubscriptionID, ResourceGroup, Location string
	VNet, Subnet, SecurityGroup             string
}

// CloudConfig is the azure.json of a self-managed cluster whose nodes are
// not scale-set or availability-set VMs: vmType standard, a Standard load
// balancer whose pools hold node IPs, a managed identity, and the emulator
// as its Resource Manager (read through /metadata/endpoints).
func (c Config) CloudConfig() map[string]any {
	m := map[string]any{
		"cloudConfigType":            "file",
		"tenantId":                   "00000000-0000-0000-0000-000000000001",
		"subscriptionId":             c.SubscriptionID,
		"resourceGroup":              c.ResourceGroup,
		"location":                   c.Location,
		"vnetName":                   c.VNet,
		"vnetResourceGroup":          c.ResourceGroup,
		"subnetName":                 c.Subnet,
		"securityGroupName":          c.SecurityGroup,
		"securityGroupResourceGroup": c.ResourceGroup,
		"vmType":                     "standard",
		"loadBalancerSku":            "standard",
		"loadBalancerBackendPoolConfigurationType": "nodeIP",
		"useManagedIdentityExtension":              true,
		"useInstanceMetadata":                      false,
		"resourceManagerEndpoint":                  c.Emulator.URL + "/",
	}
	for k, v := range c.Extra {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	return m
}

// LogPath is where Start has the process named name log: in dir.
func LogPath(dir, name string) string { return filepath.Join(dir, name+".log") }

// Start writes the cloud config and starts the process; the caller stops it.
func Start(c Config, name string) (*supervisor.Process, error) {
	cfgPath := filepath.Join(c.Dir, name+"-azure.json")
	b, err := json.MarshalIndent(c.CloudConfig(), "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return nil, err
	}
	clusterName := c.ClusterName
	if clusterName == "" {
		clusterName = "kubernetes"
	}
	args := []string{
		"--cloud-provider=azure", "--cloud-config=" + cfgPath, "--kubeconfig=" + c.Kubeconfig,
		"--authentication-kubeconfig=" + c.Kubeconfig, "--authorization-kubeconfig=" + c.Kubeconfig,
		"--controllers=service-lb-controller", "--cluster-name=" + clusterName,
		"--secure-port=0", "--configure-cloud-routes=false", "--allocate-node-cidrs=false", "--v=2",
	}
	if c.LeaseNamespace != "" {
		args = append(args, "--leader-elect=true", "--leader-elect-resource-namespace="+c.LeaseNamespace)
		if d := c.LeaseDuration; d > 0 {
			args = append(args, "--leader-elect-lease-duration="+d.String(),
				"--leader-elect-renew-deadline="+(d*2/3).String(), "--leader-elect-retry-period="+(d/6).String())
		}
	} else {
		args = append(args, "--leader-elect=false")
	}
	env := append(os.Environ(),
		"SSL_CERT_FILE="+c.Emulator.CAFile,
		// The managed identity's token endpoint (see the emulator's identity.go).
		"IDENTITY_ENDPOINT="+c.Emulator.URL+"/msi/token",
		"IDENTITY_HEADER="+c.Identity,
	)
	return supervisor.Start(supervisor.Spec{Name: c.Binary, Args: args, Env: env,
		Log: LogPath(c.Dir, name), DieWithParent: true})
}
