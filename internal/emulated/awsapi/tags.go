package awsapi

import (
	"net/http"
	"slices"
	"strconv"
)

// ELBv2 tags, and small helpers of both APIs.

// elbResourceExists: ELB tags only load balancers, target groups and
// listeners.
func (e *Emulator) elbResourceExists(arn string) bool {
	_, lb := e.lbs[arn]
	_, tg := e.tgs[arn]
	_, l := e.listeners[arn]
	return lb || tg || l
}

func (e *Emulator) addTags(p params) (any, error) {
	arns := p.strings("ResourceArns")
	for _, a := range arns {
		if !e.elbResourceExists(a) {
			return nil, errorf(http.StatusBadRequest, "LoadBalancerNotFound", "Load balancer '%s' not found", a)
		}
	}
	for _, a := range arns {
		e.setTags(a, elbTags(p))
	}
	return nil, nil
}

func (e *Emulator) removeTags(p params) (any, error) {
	for _, a := range p.strings("ResourceArns") {
		for _, k := range p.strings("TagKeys") {
			delete(e.tags[a], k)
		}
	}
	return nil, nil
}

func (e *Emulator) describeTags(p params) (any, error) {
	type desc struct {
		ResourceArn string   `xml:"ResourceArn"`
		Tags        []xmlTag `xml:"Tags>member"`
	}
	var out []desc
	for _, a := range p.strings("ResourceArns") {
		if !e.elbResourceExists(a) {
			return nil, errorf(http.StatusBadRequest, "LoadBalancerNotFound", "Load balancer '%s' not found", a)
		}
		d := desc{ResourceArn: a}
		for _, t := range e.tagsOf(a) {
			d.Tags = append(d.Tags, xmlTag{t.k, t.v})
		}
		out = append(out, d)
	}
	return struct {
		TagDescriptions []desc `xml:"TagDescriptions>member"`
	}{out}, nil
}

func clone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func atoi32(s string, def int32) int32 {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return def
	}
	return int32(n)
}
