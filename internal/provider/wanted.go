package provider

import "context"

// A caller of Backends that needs only some listeners' health (a readiness
// gate: the listeners of the pod's Services) names them in the context. A
// provider that reads health per listener with a budget (Azure's
// rule-health operation) spends it on those: a load balancer holding many
// other Services' rules must not keep the budget from the rule a pod waits
// for. Without the hint every listener's health is wanted.

type wantedKey struct{}

// WithWantedListeners returns ctx naming listeners as the ones whose health
// the caller needs.
func WithWantedListeners(ctx context.Context, listeners []string) context.Context {
	set := make(map[string]bool, len(listeners))
	for _, l := range listeners {
		set[l] = true
	}
	return context.WithValue(ctx, wantedKey{}, set)
}

// WantedListener reports whether ctx wants listener's health: true when ctx
// names no listeners.
func WantedListener(ctx context.Context, listener string) bool {
	set, ok := ctx.Value(wantedKey{}).(map[string]bool)
	return !ok || set[listener]
}
