package azuredp

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
)

// The rule-health operation's own lag (the lab's --health-lag): Azure
// computes rule health from its probes' status, which reaches ARM some time
// after the data plane acted on it. The lagged answer is the data plane's
// state as it was lag ago, so that a gate that trusts the answer can be
// shown wrong.

// lagSample is every programmed rule's answer at one instant.
type lagSample struct {
	at    time.Time
	rules map[ruleKey][]azurearm.BackendHealth
}

// lagPeriod is how often the lagged view samples the data plane.
const lagPeriod = 200 * time.Millisecond

// LaggedRuleHealth returns a RuleHealth that answers with the data plane's
// state lag ago (RuleHealth itself when lag is 0), and a stop for its
// sampler. A rule that was not programmed lag ago has no probe data then:
// the answer lists no address, as RuleHealth's for a rule not programmed
// yet.
func (d *DataPlane) LaggedRuleHealth(lag time.Duration) (azurearm.RuleHealth, func()) {
	if lag <= 0 {
		return d.RuleHealth, func() {}
	}
	ctx, cancel := context.WithCancel(d.ctx)
	var mu sync.Mutex
	var samples []lagSample
	var wg sync.WaitGroup
	wg.Go(func() {
		wait.NonSlidingUntilWithContext(ctx, func(context.Context) {
			s := lagSample{at: time.Now(), rules: d.allRuleHealth()}
			mu.Lock()
			// Keep what covers lag, and one sample older than it.
			cut := 0
			for cut+1 < len(samples) && time.Since(samples[cut+1].at) > lag {
				cut++
			}
			samples = append(samples[cut:], s)
			mu.Unlock()
		}, lagPeriod)
	})
	f := func(resourceGroup, loadBalancer, rule string) ([]azurearm.BackendHealth, error) {
		if !strings.EqualFold(resourceGroup, d.cfg.ResourceGroup) {
			return nil, fmt.Errorf("%w: resource group %s is not %s", ErrUnknownRule, resourceGroup, d.cfg.ResourceGroup)
		}
		k := ruleKey{strings.ToLower(loadBalancer), strings.ToLower(rule)}
		mu.Lock()
		defer mu.Unlock()
		for i := len(samples) - 1; i >= 0; i-- {
			if time.Since(samples[i].at) < lag {
				continue
			}
			if hs, ok := samples[i].rules[k]; ok {
				return hs, nil
			}
			break
		}
		return []azurearm.BackendHealth{}, nil
	}
	return f, func() { cancel(); wg.Wait() }
}

// allRuleHealth is RuleHealth of every programmed rule now.
func (d *DataPlane) allRuleHealth() map[ruleKey][]azurearm.BackendHealth {
	d.mu.Lock()
	var keys []ruleKey
	for _, r := range d.view.rules {
		keys = append(keys, r.key())
	}
	d.mu.Unlock()
	out := make(map[ruleKey][]azurearm.BackendHealth, len(keys))
	for _, k := range keys {
		if hs, err := d.RuleHealth(d.cfg.ResourceGroup, k.lb, k.rule); err == nil {
			out[k] = hs
		}
	}
	return out
}
