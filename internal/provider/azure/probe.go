package azure

import (
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

var _ provider.ProbeDecider = (*Provider)(nil)

// ProbeDecidesLocal implements provider.ProbeDecider: a node-mode Local
// Service's pool holds every node, and the probe on healthCheckNodePort
// takes out those without a ready local endpoint, as cloud-provider-azure's
// nodeIP and NIC pools do. An admin state Down for such a node would be an
// ARM write (seconds, and throttled) where the probe acts within its fall
// count without one; a rollout that moves the pod to another node then
// writes nothing (docs/azure.md, "What a rollout costs").
func (p *Provider) ProbeDecidesLocal() bool { return true }

// minProbeInterval is Azure's shortest probe interval in seconds.
const minProbeInterval = 5

// azureInterval is the interval Azure runs for a requested one: whole
// seconds, at least five.
func azureInterval(millis int32) int32 {
	s := (millis + 999) / 1000
	if s < minProbeInterval {
		s = minProbeInterval
	}
	return s
}

// renderProbe writes a model probe as an Azure probe. Azure probes take whole
// seconds (at least 5) and have no rise count; the name carries the model's
// interval and rise (probeName) so that Observe reports the probe zerodrop
// asked for, while Azure runs the nearest it can (docs/azure.md).
func renderProbe(name string, p model.Probe, backendPort int32) *armnetwork.Probe {
	port := p.Port
	if port == 0 {
		port = backendPort
	}
	props := &armnetwork.ProbePropertiesFormat{
		Protocol:          to.Ptr(armnetwork.ProbeProtocolTCP),
		Port:              to.Ptr(port),
		IntervalInSeconds: to.Ptr(azureInterval(p.IntervalMillis)),
		ProbeThreshold:    to.Ptr(max(1, p.Fall)),
	}
	if p.Kind == model.ProbeHTTP {
		path := p.Path
		if path == "" {
			path = "/"
		}
		props.Protocol, props.RequestPath = to.Ptr(armnetwork.ProbeProtocolHTTP), to.Ptr(path)
	}
	return &armnetwork.Probe{Name: to.Ptr(name), Properties: props}
}

// fromProbe reads an Azure probe back. A probe on the rule's backend port is
// a model probe without a port override. Interval and rise come from the
// name unless the Azure interval no longer matches it (someone changed the
// probe): then Azure's values are reported, and the diff rewrites it.
func fromProbe(pr *armnetwork.Probe, backendPort int32) model.Probe {
	out := model.Probe{Kind: model.ProbeTCP, Rise: model.DefaultRise, Fall: model.DefaultFall}
	pp := pr.Properties
	if pp == nil {
		return out
	}
	if pp.Protocol != nil && *pp.Protocol != armnetwork.ProbeProtocolTCP {
		out.Kind, out.Path = model.ProbeHTTP, str(pp.RequestPath)
	}
	if port := deref(pp.Port); port != backendPort {
		out.Port = port
	}
	switch {
	case pp.ProbeThreshold != nil:
		out.Fall = *pp.ProbeThreshold
	case pp.NumberOfProbes != nil:
		out.Fall = *pp.NumberOfProbes
	}
	seconds := deref(pp.IntervalInSeconds)
	if interval, rise, ok := parseProbeParams(str(pr.Name)); ok && azureInterval(interval) == seconds {
		out.IntervalMillis, out.Rise = interval, rise
	} else {
		out.IntervalMillis = seconds * 1000
	}
	return out
}
