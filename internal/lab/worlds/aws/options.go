// Package aws is the lab's world of emulated AWS (`zerodrop lab --provider
// aws-emulator`): each run gets an ELBv2 and EC2 emulator of its own
// (internal/emulated/awsapi) served over HTTPS on the root namespace's
// loopback, the lab's nodes seeded in it as EC2 instances of one VPC, and
// the real aws-cloud-controller-manager of k8s.io/cloud-provider-aws
// (internal/lab/ccm) as the writer of the upstream and recipe modes: two
// processes with their own leader election, creating a Network Load
// Balancer of instance targets for the workload's Service
// (service.beta.kubernetes.io/aws-load-balancer-type: nlb). The Service's
// status carries the NLB's DNS name, which the world resolves to a frontend
// address of the run's pool, as a client's resolver would. Every call the
// emulator answers is recorded; the world's figures are the act's writes
// by operation, per restart of the writer too (record.go). Target health
// keeps AWS's time: the registration delay and the propagation time are
// the world's Options, the deregistration delay the target group's (AWS's
// 300 s, which the CCM never changes).
package aws

import (
	"fmt"
	"time"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/lab/world"
)

// Options are the world's variants: its clocks and the CCM it runs.
type Options struct {
	// RegistrationDelay is how long a registered target stays in
	// Elb.RegistrationInProgress before its health checks start
	// (awsapi.DefaultRegistrationDelay: a field report, not documented).
	RegistrationDelay time.Duration
	// Propagation is how long the data plane lags the target states
	// (awsapi.DefaultPropagation: a field report).
	Propagation time.Duration
	// AssumedPropagation is zerodrop's --aws-propagation in gates mode, the
	// lag the termination gate assumes: the emulator's Propagation unless
	// the lab is told otherwise, so that a sweep can move the emulator's
	// lag past a fixed assumption (where the gate's promise ends).
	AssumedPropagation time.Duration
	// HealthCheck, when set, is the health check the workload's Service
	// asks the CCM for through its annotations; zero: the CCM's own.
	HealthCheck HealthCheck
	// CCMBinary is cloud-provider-aws's aws-cloud-controller-manager
	// (ccm.AWSBinary: built on first use, then cached).
	CCMBinary string
}

// Defaults are the timings, each the emulator's default with its
// source there; the gate assumes the emulator's propagation, and the
// health checks are the CCM's.
func Defaults() Options {
	return Options{RegistrationDelay: awsapi.DefaultRegistrationDelay, Propagation: awsapi.DefaultPropagation,
		AssumedPropagation: awsapi.DefaultPropagation}
}

// World is emulated AWS, at one point of the options.
type World struct{ opts Options }

// New is the world with opts.
func New(opts Options) *World { return &World{opts: opts} }

var (
	_ world.World   = (*World)(nil)
	_ world.Variant = (*World)(nil)
)

// Name names the world.
func (w *World) Name() string { return "emulated AWS" }

// Options are the world's options.
func (w *World) Options() Options { return w.opts }

// Clock: the report's clocks are Azure's; the AWS world's are in its
// variant and its figures, the gates' bound too (AWSFigures.GatesBound,
// bound.go): the target group's health check is known only once the CCM
// has written it.
func (w *World) Clock(report.Mode, time.Duration) *report.AzureClock { return nil }

// Variant is the world's clocks.
func (w *World) Variant() string {
	o := w.opts
	v := fmt.Sprintf("registration delay %s, propagation %s, deregistration delay %s (the target group's default)",
		o.RegistrationDelay, o.Propagation, awsapi.DefaultDeregistrationDelay)
	if o.AssumedPropagation != o.Propagation {
		v += fmt.Sprintf(", gates assume propagation %s", o.AssumedPropagation)
	}
	if o.HealthCheck != (HealthCheck{}) {
		v += ", health check " + o.HealthCheck.String()
	}
	return v
}
