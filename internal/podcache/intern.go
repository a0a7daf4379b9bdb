package podcache

import (
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// An informer decodes every pod on its own: each string, each label map and
// each list a separate allocation, though most of them are alike across
// pods — the namespace, the node's name, the labels of a Deployment's pods,
// the conditions' types and statuses, zerodrop's readiness gate. At 40,000
// cached pods the copies are megabytes (issue 49: a data-plane replica at
// 10,000 Services, its pods 90 MiB of a 238 MiB heap). trim makes every pod
// hold one shared value for each of them instead.
//
// A shared value must never be changed in place: a change to one pod's
// labels would be every pod's. No reader changes a cached pod (the cache
// hands out deep copies; event handlers only read it: STYLE's "informer
// objects deep-copied before any change"), so sharing is safe as long as
// that holds.

// maxInterned bounds each table: past it, the table starts again empty
// (values already handed out stay with their pods; only later pods stop
// sharing with them). Label sets come and go with ReplicaSets; without a
// bound the tables would keep every set a cluster ever had.
const maxInterned = 1 << 17

// interner holds the shared values; mu guards it (trim holds it for a
// pod).
type interner struct {
	mu     sync.Mutex
	strs   map[string]string
	labels map[string]map[string]string
	gateLs map[string][]corev1.PodReadinessGate
}

var shared interner

// str is s's shared copy.
func (in *interner) str(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := in.strs[s]; ok {
		return v
	}
	if in.strs == nil || len(in.strs) >= maxInterned {
		in.strs = make(map[string]string)
	}
	in.strs[s] = s
	return s
}

// labelSet is the shared map equal to labels (nil for none). Its keys and
// values are shared strings too: pods of two ReplicaSets of a Deployment
// differ in one value.
func (in *interner) labelSet(labels map[string]string) map[string]string {
	if len(labels) == 0 {
		return nil
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		// NUL is in no label key or value.
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(labels[k])
		b.WriteByte(0)
	}
	id := b.String()
	if m, ok := in.labels[id]; ok {
		return m
	}
	m := make(map[string]string, len(labels))
	for k, v := range labels {
		m[in.str(k)] = in.str(v)
	}
	if in.labels == nil || len(in.labels) >= maxInterned {
		in.labels = make(map[string]map[string]string)
	}
	in.labels[id] = m
	return m
}

// gates is the shared list equal to gates (nil for none).
func (in *interner) gates(gates []corev1.PodReadinessGate) []corev1.PodReadinessGate {
	if len(gates) == 0 {
		return nil
	}
	var b strings.Builder
	for _, g := range gates {
		b.WriteString(string(g.ConditionType))
		b.WriteByte(0)
	}
	id := b.String()
	if l, ok := in.gateLs[id]; ok {
		return l
	}
	l := make([]corev1.PodReadinessGate, len(gates))
	for i, g := range gates {
		l[i] = corev1.PodReadinessGate{ConditionType: corev1.PodConditionType(in.str(string(g.ConditionType)))}
	}
	if in.gateLs == nil || len(in.gateLs) >= maxInterned {
		in.gateLs = make(map[string][]corev1.PodReadinessGate)
	}
	in.gateLs[id] = l
	return l
}

// conditions is a copy of conds (each pod its own: the times are the pod's)
// whose words are shared strings.
func (in *interner) conditions(conds []corev1.PodCondition) []corev1.PodCondition {
	if len(conds) == 0 {
		return nil
	}
	out := make([]corev1.PodCondition, len(conds))
	for i, c := range conds {
		c.Type = corev1.PodConditionType(in.str(string(c.Type)))
		c.Status = corev1.ConditionStatus(in.str(string(c.Status)))
		c.Reason = in.str(c.Reason)
		c.Message = in.str(c.Message)
		out[i] = c
	}
	return out
}
