package azurearm

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// Resources other than load balancers, kept as JSON documents: network
// security groups, public IP addresses and route tables (read and written),
// virtual networks and subnets (read; SeedSubnet stores them), the
// Microsoft.Compute provider (read once at cloud-provider-azure's start for
// its zones), virtual machines (read; SeedVirtualMachine stores them: the
// availability set cloud-provider-azure's multiple-SLB mode places a node
// by) and an empty list of scale sets.
// ARM fills in what it owns on a write: id, name, type, etag, and
// properties.provisioningState; a public IP gets its address.

type document struct {
	body []byte
	etag string
}

// resourceKey is the store key of a generic resource.
func resourceKey(t target) string {
	return strings.ToLower(t.kind + "/" + t.rg + "/" + t.parent + "/" + t.name)
}

// resourceID is the ARM ID of a generic resource.
func resourceID(t target) string {
	base := "/subscriptions/" + t.sub + "/resourceGroups/" + t.rg + "/providers/Microsoft.Network/"
	switch t.kind {
	case kNSG:
		return base + "networkSecurityGroups/" + t.name
	case kPIP:
		return base + "publicIPAddresses/" + t.name
	case kRouteTable:
		return base + "routeTables/" + t.name
	case kVNet:
		return base + "virtualNetworks/" + t.name
	case kSubnet:
		return base + "virtualNetworks/" + t.parent + "/subnets/" + t.name
	case kVM:
		return "/subscriptions/" + t.sub + "/resourceGroups/" + t.rg + "/providers/Microsoft.Compute/virtualMachines/" + t.name
	}
	return base + t.kind + "/" + t.name
}

var resourceTypes = map[string]string{
	kNSG: "Microsoft.Network/networkSecurityGroups", kPIP: "Microsoft.Network/publicIPAddresses",
	kRouteTable: "Microsoft.Network/routeTables", kVNet: "Microsoft.Network/virtualNetworks",
	kSubnet: "Microsoft.Network/virtualNetworks/subnets",
}

// putGeneric stores a document. e.writeMu is held.
func (e *Emulator) putGeneric(t target, body []byte) *reply {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return errorReply(http.StatusBadRequest, "InvalidRequestContent", "the request body is not a JSON object")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	key := resourceKey(t)
	old, existed := e.docs[key]
	if _, ok := m["location"]; !ok && t.kind != kSubnet {
		if !existed {
			return errorReply(http.StatusBadRequest, "LocationRequired", "The location property is required for this definition.")
		}
		var prev map[string]any
		_ = json.Unmarshal(old.body, &prev)
		m["location"] = prev["location"]
	}
	props, _ := m["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
		m["properties"] = props
	}
	if t.kind == kPIP {
		if rep := e.assignPublicIP(t, props, old); rep != nil {
			return rep
		}
	}
	etag := e.nextEtag()
	m["id"], m["name"], m["type"], m["etag"] = resourceID(t), t.name, resourceTypes[t.kind], etag
	props["provisioningState"] = "Succeeded"
	b, err := json.Marshal(m)
	if err != nil {
		return errorReply(http.StatusInternalServerError, "InternalServerError", err.Error())
	}
	e.docs[key] = &document{body: b, etag: etag}
	if existed {
		return jsonReply(http.StatusOK, b)
	}
	return jsonReply(http.StatusCreated, b)
}

// assignPublicIP keeps a public IP's address, or gives it the lowest free
// one of PublicPrefix (a static one as asked).
func (e *Emulator) assignPublicIP(t target, props map[string]any, old *document) *reply {
	if old != nil {
		var prev struct {
			Properties struct {
				IPAddress string `json:"ipAddress"`
			} `json:"properties"`
		}
		if json.Unmarshal(old.body, &prev) == nil && prev.Properties.IPAddress != "" {
			props["ipAddress"] = prev.Properties.IPAddress
			return nil
		}
	}
	for a := e.opts.PublicPrefix.Masked().Addr().Next(); e.opts.PublicPrefix.Contains(a); a = a.Next() {
		if _, used := e.publicIPs[a]; !used {
			e.publicIPs[a] = resourceKey(t)
			props["ipAddress"] = a.String()
			return nil
		}
	}
	return errorReply(http.StatusBadRequest, "PublicIPCountLimitReached", "no free public address")
}

func (e *Emulator) deleteGeneric(t target) *reply {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := resourceKey(t)
	if _, ok := e.docs[key]; !ok {
		return &reply{status: http.StatusNoContent, header: http.Header{}}
	}
	delete(e.docs, key)
	for a, k := range e.publicIPs {
		if k == key {
			delete(e.publicIPs, a)
		}
	}
	return &reply{status: http.StatusAccepted, header: http.Header{}}
}

// listGeneric lists the documents of one kind in a resource group.
func (e *Emulator) listGeneric(t target, kind string) *reply {
	prefix := strings.ToLower(kind + "/" + t.rg + "/")
	var keys []string
	for k := range e.docs {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	items := make([]json.RawMessage, 0, len(keys))
	for _, k := range keys {
		items = append(items, e.docs[k].body)
	}
	return listReply(items)
}

// provider is a resource provider's registration document. For
// Microsoft.Compute, cloud-provider-azure reads the zones of virtual
// machines in its location at start (pkg/provider/azure_zones.go); the
// emulator's region has none, as a region without availability zones.
func (e *Emulator) provider(t target) *reply {
	doc := map[string]any{
		"id":                "/subscriptions/" + t.sub + "/providers/" + t.name,
		"namespace":         t.name,
		"registrationState": "Registered",
		"resourceTypes": []map[string]any{{
			"resourceType": "virtualMachines",
			"locations":    []string{e.opts.Location},
			"zoneMappings": []map[string]any{{"location": e.opts.Location, "zones": []string{}}},
		}},
	}
	b, _ := json.Marshal(doc)
	return jsonReply(http.StatusOK, b)
}

// SeedSubnet stores a virtual network with one subnet, as the cluster's
// network would exist before any controller runs.
func (e *Emulator) SeedSubnet(subscriptionID, resourceGroup, vnet, subnet string, prefix netip.Prefix) {
	e.mu.Lock()
	defer e.mu.Unlock()
	vt := target{kind: kVNet, sub: subscriptionID, rg: resourceGroup, name: vnet}
	st := target{kind: kSubnet, sub: subscriptionID, rg: resourceGroup, parent: vnet, name: subnet}
	etag := e.nextEtag()
	sdoc := map[string]any{"id": resourceID(st), "name": subnet, "type": resourceTypes[kSubnet], "etag": etag,
		"properties": map[string]any{"addressPrefix": prefix.String(), "provisioningState": "Succeeded"}}
	vdoc := map[string]any{"id": resourceID(vt), "name": vnet, "type": resourceTypes[kVNet], "etag": etag, "location": e.opts.Location,
		"properties": map[string]any{"addressSpace": map[string]any{"addressPrefixes": []string{prefix.String()}},
			"subnets": []any{sdoc}, "provisioningState": "Succeeded"}}
	sb, _ := json.Marshal(sdoc)
	vb, _ := json.Marshal(vdoc)
	e.docs[resourceKey(st)] = &document{body: sb, etag: etag}
	e.docs[resourceKey(vt)] = &document{body: vb, etag: etag}
}

// document is the stored JSON of the resource a request names, or nil.
func (e *Emulator) document(t target) []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	var v any
	switch t.kind {
	case kLB:
		lb, ok := e.lbs[lbKey(t.rg, t.name)]
		if !ok {
			return nil
		}
		v = lb
	case kPool:
		p := findPool(e.lbs[lbKey(t.rg, t.parent)], t.name)
		if p == nil {
			return nil
		}
		v = p
	default:
		if d, ok := e.docs[resourceKey(t)]; ok {
			return d.body
		}
		return nil
	}
	b, _ := json.Marshal(v)
	return b
}

// precondition checks If-Match and If-None-Match against the current
// document; it returns the refusal, or nil.
func (e *Emulator) precondition(t target, info reqInfo) *reply {
	e.mu.Lock()
	current, exists := "", false
	switch t.kind {
	case kLB:
		if lb, ok := e.lbs[lbKey(t.rg, t.name)]; ok {
			current, exists = str(lb.Etag), true
		}
	case kPool:
		if p := findPool(e.lbs[lbKey(t.rg, t.parent)], t.name); p != nil {
			current, exists = str(p.Etag), true
		}
	default:
		if d, ok := e.docs[resourceKey(t)]; ok {
			current, exists = d.etag, true
		}
	}
	e.mu.Unlock()
	msg := ""
	switch {
	case info.ifNoneMatch == "*" && exists:
		msg = "the resource exists (If-None-Match: *)"
	case info.ifMatch == "":
	case !exists:
		msg = "the resource does not exist (If-Match: " + info.ifMatch + ")"
	case info.ifMatch != "*" && info.ifMatch != current:
		msg = "ETag " + current + " does not match If-Match " + info.ifMatch
	}
	if msg == "" {
		return nil
	}
	e.mu.Lock()
	e.counters.PreconditionFailed++
	e.mu.Unlock()
	return errorReply(http.StatusPreconditionFailed, "PreconditionFailed", msg)
}

// SeedSecurityGroup stores an empty network security group, as the
// cluster's would exist before cloud-provider-azure runs (it reads the one
// its cloud config names on every reconcile and fails without it).
func (e *Emulator) SeedSecurityGroup(subscriptionID, resourceGroup, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := target{kind: kNSG, sub: subscriptionID, rg: resourceGroup, name: name}
	etag := e.nextEtag()
	b, _ := json.Marshal(map[string]any{"id": resourceID(t), "name": name, "type": resourceTypes[kNSG], "etag": etag,
		"location": e.opts.Location, "properties": map[string]any{"securityRules": []any{}, "provisioningState": "Succeeded"}})
	e.docs[resourceKey(t)] = &document{body: b, etag: etag}
}

// SeedVirtualMachine stores a virtual machine in an availability set, as
// the VM of a node (its name the node's host name).
func (e *Emulator) SeedVirtualMachine(subscriptionID, resourceGroup, name, availabilitySet string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := target{kind: kVM, sub: subscriptionID, rg: resourceGroup, name: name}
	asID := "/subscriptions/" + subscriptionID + "/resourceGroups/" + resourceGroup + "/providers/Microsoft.Compute/availabilitySets/" + availabilitySet
	b, _ := json.Marshal(map[string]any{"id": resourceID(t), "name": name, "type": "Microsoft.Compute/virtualMachines",
		"location": e.opts.Location, "properties": map[string]any{"availabilitySet": map[string]any{"id": asID},
			"provisioningState": "Succeeded"}})
	e.docs[resourceKey(t)] = &document{body: b, etag: e.nextEtag()}
}
