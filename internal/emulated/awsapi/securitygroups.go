package awsapi

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
)

// Security groups and their ingress rules. EC2 keeps a rule per source
// and describes them grouped by protocol and ports (one IpPermission with
// several ipRanges and groups), which the CCM ungroups again
// (sets_ippermissions.go Ungroup) before it diffs: the grouping is part of
// what it must read.

type xmlIPRange struct {
	CIDR        string `xml:"cidrIp"`
	Description string `xml:"description,omitempty"`
}

type xmlGroupPair struct {
	GroupID     string `xml:"groupId"`
	UserID      string `xml:"userId"`
	Description string `xml:"description,omitempty"`
}

// xmlPermission always carries its four source lists, empty ones as
// empty elements (<groups/>), as EC2 sends them: the SDK then decodes an
// empty list as an empty, non-nil slice, and the CCM keys permissions by
// their JSON (sets_ippermissions.go:172), where [] is not the null of the
// rules it builds itself — what it then writes is the CCM's to show.
type xmlPermission struct {
	Protocol    string                `xml:"ipProtocol"`
	FromPort    *int32                `xml:"fromPort,omitempty"`
	ToPort      *int32                `xml:"toPort,omitempty"`
	Groups      itemsOf[xmlGroupPair] `xml:"groups"`
	Ranges      itemsOf[xmlIPRange]   `xml:"ipRanges"`
	IPv6Ranges  itemsOf[struct{}]     `xml:"ipv6Ranges"`
	PrefixLists itemsOf[struct{}]     `xml:"prefixListIds"`
}

// itemsOf is an ec2query list that is written even when empty.
type itemsOf[T any] struct {
	Items []T `xml:"item"`
}

type xmlSecurityGroup struct {
	OwnerID     string          `xml:"ownerId"`
	GroupID     string          `xml:"groupId"`
	GroupName   string          `xml:"groupName"`
	Description string          `xml:"groupDescription"`
	VpcID       string          `xml:"vpcId"`
	Ingress     []xmlPermission `xml:"ipPermissions>item"`
	Tags        []xmlEC2Tag     `xml:"tagSet>item"`
}

// permissions groups rules as EC2 describes them, in the rules' order.
func permissions(rules []Rule) []xmlPermission {
	var out []xmlPermission
	index := map[string]int{}
	for _, r := range rules {
		key := fmt.Sprintf("%s/%d/%d", r.Protocol, r.FromPort, r.ToPort)
		i, ok := index[key]
		if !ok {
			p := xmlPermission{Protocol: r.Protocol}
			if r.Protocol != "-1" { // all traffic has no ports
				p.FromPort, p.ToPort = ptr(r.FromPort), ptr(r.ToPort)
			}
			i = len(out)
			index[key] = i
			out = append(out, p)
		}
		if r.GroupID != "" {
			out[i].Groups.Items = append(out[i].Groups.Items, xmlGroupPair{GroupID: r.GroupID, UserID: AccountID, Description: r.Description})
		} else {
			out[i].Ranges.Items = append(out[i].Ranges.Items, xmlIPRange{CIDR: r.CIDR, Description: r.Description})
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func (e *Emulator) sgDoc(sg *SecurityGroup) xmlSecurityGroup {
	return xmlSecurityGroup{OwnerID: AccountID, GroupID: sg.ID, GroupName: sg.Name, Description: sg.Description, VpcID: sg.VPCID,
		Ingress: permissions(sg.Ingress), Tags: e.ec2Tags(sg.ID)}
}

func (e *Emulator) describeSecurityGroups(p params) (any, error) {
	ids, names := p.strings("GroupId"), p.strings("GroupName")
	for _, id := range ids {
		if _, ok := e.sgs[id]; !ok {
			return nil, errorf(http.StatusBadRequest, "InvalidGroup.NotFound", "The security group '%s' does not exist", id)
		}
	}
	if len(ids) == 0 {
		ids = sortedKeys(e.sgs)
	}
	fs := filters(p)
	var out []xmlSecurityGroup
	for _, id := range ids {
		sg := e.sgs[id]
		if len(names) > 0 && !slices.Contains(names, sg.Name) {
			continue
		}
		if !matches(fs, e.tags[id], func(name string) []string {
			switch name {
			case "group-id":
				return []string{sg.ID}
			case "group-name":
				return []string{sg.Name}
			case "vpc-id":
				return []string{sg.VPCID}
			case "ip-permission.group-id":
				var refs []string
				for _, r := range sg.Ingress {
					refs = append(refs, r.GroupID)
				}
				return refs
			}
			return nil
		}) {
			continue
		}
		out = append(out, e.sgDoc(sg))
	}
	return struct {
		SecurityGroups []xmlSecurityGroup `xml:"securityGroupInfo>item"`
	}{out}, nil
}

// createSecurityGroup refuses a second group of the same name in a VPC
// (InvalidGroup.Duplicate: the CCM retries its read then, aws.go:1617).
func (e *Emulator) createSecurityGroup(p params) (any, error) {
	name, vpc := p.get("GroupName"), p.get("VpcId")
	for _, sg := range e.sgs {
		if sg.Name == name && sg.VPCID == vpc {
			return nil, errorf(http.StatusBadRequest, "InvalidGroup.Duplicate", "The security group '%s' already exists for VPC '%s'", name, vpc)
		}
	}
	sg := &SecurityGroup{ID: e.newID("sg"), Name: name, Description: p.get("GroupDescription"), VPCID: vpc}
	e.sgs[sg.ID] = sg
	for _, spec := range p.items("TagSpecification") {
		tags := map[string]string{}
		for _, t := range spec.items("Tag") {
			tags[t.get("Key")] = t.get("Value")
		}
		e.setTags(sg.ID, tags)
	}
	return struct {
		GroupID string      `xml:"groupId"`
		Tags    []xmlEC2Tag `xml:"tagSet>item"`
	}{sg.ID, e.ec2Tags(sg.ID)}, nil
}

// deleteSecurityGroup refuses a group a load balancer or an instance uses
// (DependencyViolation).
func (e *Emulator) deleteSecurityGroup(p params) (any, error) {
	id := p.get("GroupId")
	if _, ok := e.sgs[id]; !ok {
		return nil, errorf(http.StatusBadRequest, "InvalidGroup.NotFound", "The security group '%s' does not exist", id)
	}
	for _, lb := range e.lbs {
		if slices.Contains(lb.securityGroups, id) {
			return nil, errorf(http.StatusBadRequest, "DependencyViolation", "resource %s has a dependent object", id)
		}
	}
	for _, in := range e.instances {
		if slices.Contains(in.SecurityGroups, id) {
			return nil, errorf(http.StatusBadRequest, "DependencyViolation", "resource %s has a dependent object", id)
		}
	}
	delete(e.sgs, id)
	delete(e.tags, id)
	return struct {
		Return bool `xml:"return"`
	}{true}, nil
}

// requestRules reads IpPermissions.N into one rule per source.
func requestRules(p params) ([]Rule, error) {
	var out []Rule
	for _, perm := range p.items("IpPermissions") {
		base := Rule{Protocol: perm.get("IpProtocol")}
		if base.Protocol == "" {
			return nil, errorf(http.StatusBadRequest, "MissingParameter", "The request must contain the parameter ipProtocol")
		}
		if base.Protocol != "-1" {
			from, err1 := strconv.ParseInt(perm.get("FromPort"), 10, 32)
			to, err2 := strconv.ParseInt(perm.get("ToPort"), 10, 32)
			if err1 != nil || err2 != nil {
				return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Invalid value for portRange. Must specify both from and to ports with TCP/UDP.")
			}
			base.FromPort, base.ToPort = int32(from), int32(to)
		}
		for _, r := range perm.items("IpRanges") {
			rule := base
			rule.CIDR, rule.Description = r.get("CidrIp"), r.get("Description")
			out = append(out, rule)
		}
		for _, g := range perm.items("Groups") {
			rule := base
			rule.GroupID, rule.Description = g.get("GroupId"), g.get("Description")
			out = append(out, rule)
		}
	}
	return out, nil
}

// ruleRequest is Authorize's and Revoke's group and rules.
func (e *Emulator) ruleRequest(p params) (*SecurityGroup, []Rule, error) {
	sg, ok := e.sgs[p.get("GroupId")]
	if !ok {
		return nil, nil, errorf(http.StatusBadRequest, "InvalidGroup.NotFound", "The security group '%s' does not exist", p.get("GroupId"))
	}
	rules, err := requestRules(p)
	return sg, rules, err
}

// authorizeIngress adds the rules; one that exists already refuses the
// whole call (InvalidPermission.Duplicate), as EC2 does.
func (e *Emulator) authorizeIngress(p params) (any, error) {
	sg, rules, err := e.ruleRequest(p)
	if err != nil {
		return nil, err
	}
	for _, r := range rules {
		if slices.ContainsFunc(sg.Ingress, r.same) {
			return nil, errorf(http.StatusBadRequest, "InvalidPermission.Duplicate",
				"the specified rule \"peer: %s%s, %s, from port: %d, to port: %d, ALLOW\" already exists", r.CIDR, r.GroupID, r.Protocol, r.FromPort, r.ToPort)
		}
	}
	sg.Ingress = append(sg.Ingress, rules...)
	return struct {
		Return bool `xml:"return"`
	}{true}, nil
}

// revokeIngress removes the rules that exist; when none does, EC2 answers
// InvalidPermission.NotFound.
func (e *Emulator) revokeIngress(p params) (any, error) {
	sg, rules, err := e.ruleRequest(p)
	if err != nil {
		return nil, err
	}
	before := len(sg.Ingress)
	sg.Ingress = slices.DeleteFunc(sg.Ingress, func(have Rule) bool {
		return slices.ContainsFunc(rules, have.same)
	})
	if len(sg.Ingress) == before {
		return nil, errorf(http.StatusBadRequest, "InvalidPermission.NotFound", "The specified rule does not exist in this security group.")
	}
	return struct {
		Return bool `xml:"return"`
	}{true}, nil
}
