package service

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// rejectUnrepresentable asks a provider.Validator which active Services of
// desired it cannot represent. They become invalid like a Service with a bad
// annotation (a Warning Event and ConfigValid=False in updateStatuses) and
// keep their observed listeners, so that one Service cannot stop the writes
// of the others sharing its load balancer (invariant 7).
func (c *Controller) rejectUnrepresentable(key string, st *state, observed, desired *model.LoadBalancer) *model.LoadBalancer {
	v, ok := c.opts.Provider.(provider.Validator)
	if !ok || desired == nil {
		return desired
	}
	bad := v.Invalid(key, desired)
	if len(bad) == 0 {
		return desired
	}
	rejected := map[*corev1.Service]error{}
	for _, in := range st.active {
		if err := bad[in.Service.Namespace+"/"+in.Service.Name]; err != nil {
			rejected[in.Service], st.invalid[in.Service] = err, unrepresentable{err}
		}
	}
	if len(rejected) == 0 {
		return desired
	}
	st.active = dropInvalid(st.active, st.invalid)
	out := *desired
	out.Listeners = nil
	for _, l := range desired.Listeners {
		if !ofAny(l.Name, rejected) {
			out.Listeners = append(out.Listeners, l)
		}
	}
	return keepInvalid(&out, observed, rejected, nil) // kept whole: backends as observed too
}

func ofAny(listener string, svcs map[*corev1.Service]error) bool {
	for svc := range svcs {
		if strings.HasPrefix(listener, svc.Namespace+"/"+svc.Name+"/") {
			return true
		}
	}
	return false
}

// unrepresentable marks a provider's refusal among the invalid Services, for
// its own Event reason.
type unrepresentable struct{ error }

func (u unrepresentable) Unwrap() error { return u.error }
