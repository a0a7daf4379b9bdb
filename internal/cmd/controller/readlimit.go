package controller

import (
	"fmt"

	"github.com/spf13/pflag"
)

// ReadLimit bounds the Service controller's reads of its provider: one
// token per load balancer read (service.Options.ReadQPS, ReadBurst). Each
// provider has its own flags and default, because what a read costs, and
// whom, differs: a local HAProxy's runtime API against a shared cloud
// quota.
type ReadLimit struct {
	// QPS is the sustained reads per second; Burst how many may go at once
	// after a quiet spell. Zero: the provider's default.
	QPS   float64
	Burst int
}

// DefaultHAProxyRead is --haproxy-read-qps and --haproxy-read-burst. The
// HAProxy provider batches its reads (one runtime snapshot serves every
// read for its ReadBatchWindow, 250 ms; docs/design.md, "Reads"), so
// HAProxy sees a few snapshots a second however many load balancers are
// read, and no quota is spent: the limit only guards the controller's own
// CPU against a loop gone wrong. It sits above the fastest verification
// measured, 5,000 load balancers in 1.7 s with this limit, about 3,000
// reads a second at 256 workers (docs/scale.md, "At the shipped
// defaults"), so it does not slow a restart down.
var DefaultHAProxyRead = ReadLimit{QPS: 5000, Burst: 5000}

// DefaultAzureRead is --azure-read-qps and --azure-read-burst. Each read is
// one ARM GET of a load balancer, under two published limits
// (https://learn.microsoft.com/en-us/azure/azure-resource-manager/management/request-limits-and-throttling):
// Azure Resource Manager's token bucket for subscription reads, 250 tokens
// refilled at 25 a second, per subscription, service principal and region;
// and the Microsoft.Network resource provider's 10,000 GETs per 5 minutes
// (about 33 a second) per subscription and region, shared with every other
// client of the subscription there (the cloud provider, the AKS resource
// provider, people's tooling). 10 a second and 100 at once leave more than
// half of both to them.
var DefaultAzureRead = ReadLimit{QPS: 10, Burst: 100}

// flags registers the provider's pair of read-limit flags as
// --<provider>-read-qps and --<provider>-read-burst.
func (r *ReadLimit) flags(fs *pflag.FlagSet, prov string, def ReadLimit, why string) {
	fs.Float64Var(&r.QPS, prov+"-read-qps", def.QPS, prov+": load balancer reads a second by the Service controller, sustained ("+why+"; 0: the default)")
	fs.IntVar(&r.Burst, prov+"-read-burst", def.Burst, prov+": load balancer reads the Service controller may make at once after a quiet spell, beyond --"+prov+"-read-qps (0: the default)")
}

// validate checks a read limit's flags.
func (r ReadLimit) validate(prov string) error {
	if r.QPS < 0 || r.Burst < 0 {
		return fmt.Errorf("--%s-read-qps %g, --%s-read-burst %d: want 0 (the default) or more", prov, r.QPS, prov, r.Burst)
	}
	return nil
}

// orDefault fills what is zero from def.
func (r ReadLimit) orDefault(def ReadLimit) ReadLimit {
	if r.QPS == 0 {
		r.QPS = def.QPS
	}
	if r.Burst == 0 {
		r.Burst = def.Burst
	}
	return r
}

// readLimit is the read limit of the configured provider. The control
// role reads no provider in its reconciles (the replicas write their own).
func (c *Config) readLimit() ReadLimit {
	if c.Provider == "azure" {
		return c.Azure.Read.orDefault(DefaultAzureRead)
	}
	return c.HAProxyRead.orDefault(DefaultHAProxyRead)
}
