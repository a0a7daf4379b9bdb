package azure

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"zerodrop.dev/zerodrop/internal/model"
)

// Names of the load balancer children zerodrop owns. Azure names children
// with at most 80 characters of letters, digits, '_', '.' and '-'; tags
// cannot hold '/' in their names. Kubernetes namespaces and Service names
// never contain '.', so '.' separates the parts and a name can be parsed
// back into the listener it came from:
//
//	frontend    zd-<ns>.<name>
//	rule        zd-<ns>.<name>.<proto>-<port>
//	probe       zd-<ns>.<name>.<proto>-<port>.<intervalMillis>-<rise>
//	pool        zd-<ns>.<name>  (or the rule's name, or zd-shared.<n>)
//
// A Service whose "<ns>.<name>" is too long for the budget is named
// "h<12 hex>" instead, and the LB tag zerodrop.dev.svc.h<12 hex> holds its
// namespace/name so that Observe can still name its listeners.
const (
	// childPrefix marks the children zerodrop owns; names with it are
	// reserved on a load balancer zerodrop shares.
	childPrefix = "zd-"
	// sharedPoolPrefix names the pools several Services share.
	sharedPoolPrefix = childPrefix + "shared."
	// maxSvcPart keeps the longest child name (a probe:
	// zd-<svc>.udp-65535.60000-99) within Azure's 80 characters.
	maxSvcPart = 80 - len(childPrefix) - len(".udp-65535") - len(".60000-99")

	// TagOwner marks a load balancer zerodrop writes to; its value is
	// Options.Owner. A load balancer owned by another value is refused.
	TagOwner = "zerodrop.dev.owner"
	// TagCreated marks a load balancer zerodrop created, which it deletes
	// again once no Service and no foreign child needs it.
	TagCreated = "zerodrop.dev.created"
	// tagSvcPrefix + hashed service part → namespace/name.
	tagSvcPrefix = "zerodrop.dev.svc."
	// maxTags is Azure's limit of tags on one resource.
	maxTags = 50
)

// svcPart is the part of child names that names a Service; long reports
// whether it is the hashed form (which needs a tag to be read back).
func svcPart(svc string) (part string, long bool) {
	ns, name, _ := strings.Cut(svc, "/")
	if p := ns + "." + name; len(p) <= maxSvcPart {
		return p, false
	}
	sum := sha256.Sum256([]byte(svc))
	return "h" + hex.EncodeToString(sum[:6]), true
}

// listenerParts splits a listener name (model.ListenerName) into the
// Service's namespace/name and the port part ("tcp-80").
func listenerParts(listener string) (svc, port string, err error) {
	i := strings.LastIndexByte(listener, '/')
	if i <= 0 || strings.Count(listener, "/") != 2 {
		return "", "", fmt.Errorf("listener name %q is not namespace/name/proto-port", listener)
	}
	return listener[:i], listener[i+1:], nil
}

func frontendName(svc string) string {
	p, _ := svcPart(svc)
	return childPrefix + p
}

func ruleName(listener string) (string, error) {
	svc, port, err := listenerParts(listener)
	if err != nil {
		return "", err
	}
	p, _ := svcPart(svc)
	return childPrefix + p + "." + port, nil
}

// probeName carries what Azure cannot represent (sub-5s intervals, a rise
// count) so that Observe reports the probe zerodrop asked for; see probe.go.
func probeName(rule string, p model.Probe) string {
	return fmt.Sprintf("%s.%d-%d", rule, p.IntervalMillis, p.Rise)
}

// names maps hashed service parts back to namespace/name, from LB tags.
type names map[string]string

func namesFromTags(tags map[string]*string) names {
	n := names{}
	for k, v := range tags {
		if h, ok := strings.CutPrefix(k, tagSvcPrefix); ok && v != nil {
			n[h] = *v
		}
	}
	return n
}

// svcOf reads a service part back into namespace/name.
func (n names) svcOf(part string) (string, bool) {
	if ns, name, ok := strings.Cut(part, "."); ok {
		return ns + "/" + name, ns != "" && name != ""
	}
	svc, ok := n[part]
	return svc, ok
}

// parseRule reads a rule name back into its listener name.
func (n names) parseRule(rule string) (string, bool) {
	rest, ok := strings.CutPrefix(rule, childPrefix)
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return "", false
	}
	svc, ok := n.svcOf(rest[:i])
	if !ok {
		return "", false
	}
	return svc + "/" + rest[i+1:], true
}

// parseProbeParams reads the interval and rise a probe name carries.
func parseProbeParams(probe string) (interval, rise int32, ok bool) {
	i := strings.LastIndexByte(probe, '.')
	if i < 0 {
		return 0, 0, false
	}
	a, b, found := strings.Cut(probe[i+1:], "-")
	if !found {
		return 0, 0, false
	}
	iv, err1 := strconv.ParseInt(a, 10, 32)
	r, err2 := strconv.ParseInt(b, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return int32(iv), int32(r), true
}

func owned(name *string) bool {
	return name != nil && strings.HasPrefix(*name, childPrefix)
}
