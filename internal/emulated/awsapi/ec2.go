package awsapi

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// The EC2 side: what the test or lab seeds (instances, subnets, route
// tables, security groups) and the operations the CCM calls on it. Error
// codes are the EC2 API reference's ("Error codes for the Amazon EC2
// API").

// Instance is a seeded EC2 instance: a node of the cluster.
type Instance struct {
	ID, PrivateIP, PrivateDNSName string
	SubnetID, VPCID, AZ           string
	InstanceType                  string // default m5.large
	// State is pending, running, stopping, stopped, shutting-down or
	// terminated (default running).
	State          string
	SecurityGroups []string
	// Tags, kubernetes.io/cluster/<name> among them for the CCM to see it.
	Tags map[string]string
}

// Subnet is a seeded subnet.
type Subnet struct {
	ID, VPCID, AZ, CIDR string
	Tags                map[string]string
}

// RouteTable is a seeded route table; a route to an igw-… gateway makes
// its subnets public for the CCM (aws.go isSubnetPublic).
type RouteTable struct {
	ID, VPCID string
	Main      bool
	Subnets   []string
	Routes    []Route
	Tags      map[string]string
}

// Route is one route of a table.
type Route struct{ DestinationCIDR, GatewayID string }

// SecurityGroup is a security group, seeded or created by
// CreateSecurityGroup.
type SecurityGroup struct {
	ID, Name, Description, VPCID string
	Tags                         map[string]string
	// Ingress holds one rule per source: EC2 groups them by protocol and
	// ports only when it describes them.
	Ingress []Rule
}

// Rule is one ingress rule: protocol (tcp, udp, icmp or -1), ports and
// one source, an address range or a security group.
type Rule struct {
	Protocol         string
	FromPort, ToPort int32
	CIDR, GroupID    string
	Description      string
}

// same is EC2's identity of a rule: the description is not part of it.
func (r Rule) same(o Rule) bool {
	return r.Protocol == o.Protocol && r.FromPort == o.FromPort && r.ToPort == o.ToPort && r.CIDR == o.CIDR && r.GroupID == o.GroupID
}

// AddInstance seeds an instance.
func (e *Emulator) AddInstance(in Instance) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if in.State == "" {
		in.State = "running"
	}
	if in.InstanceType == "" {
		in.InstanceType = "m5.large"
	}
	in.SecurityGroups = slices.Clone(in.SecurityGroups)
	e.instances[in.ID] = &in
	e.setTags(in.ID, in.Tags)
}

// SetInstanceState changes an instance's state (a node stopped or
// terminated).
func (e *Emulator) SetInstanceState(id, state string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	in, ok := e.instances[id]
	if !ok {
		return fmt.Errorf("no instance %s", id)
	}
	in.State = state
	return nil
}

// AddSubnet seeds a subnet.
func (e *Emulator) AddSubnet(s Subnet) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.subnets[s.ID] = &s
	e.setTags(s.ID, s.Tags)
}

// AddRouteTable seeds a route table.
func (e *Emulator) AddRouteTable(rt RouteTable) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.routes[rt.ID] = &rt
	e.setTags(rt.ID, rt.Tags)
}

// AddSecurityGroup seeds a security group (a node group's).
func (e *Emulator) AddSecurityGroup(sg SecurityGroup) {
	e.mu.Lock()
	defer e.mu.Unlock()
	sg.Ingress = slices.Clone(sg.Ingress)
	e.sgs[sg.ID] = &sg
	e.setTags(sg.ID, sg.Tags)
}

// SecurityGroupRules is a security group's ingress rules now.
func (e *Emulator) SecurityGroupRules(id string) []Rule {
	e.mu.Lock()
	defer e.mu.Unlock()
	if sg, ok := e.sgs[id]; ok {
		return slices.Clone(sg.Ingress)
	}
	return nil
}

var ec2Handlers = map[string]handler{
	"DescribeInstances":             (*Emulator).describeInstances,
	"DescribeSubnets":               (*Emulator).describeSubnets,
	"DescribeRouteTables":           (*Emulator).describeRouteTables,
	"DescribeAvailabilityZones":     (*Emulator).describeAvailabilityZones,
	"DescribeSecurityGroups":        (*Emulator).describeSecurityGroups,
	"CreateSecurityGroup":           (*Emulator).createSecurityGroup,
	"DeleteSecurityGroup":           (*Emulator).deleteSecurityGroup,
	"AuthorizeSecurityGroupIngress": (*Emulator).authorizeIngress,
	"RevokeSecurityGroupIngress":    (*Emulator).revokeIngress,
	"CreateTags":                    (*Emulator).createTags,
	"DeleteTags":                    (*Emulator).deleteTags,
}

// filter is one Filter.N of a Describe call: a resource matches when one
// of its values for Name is one of Values (EC2 ANDs filters, ORs values).
type filter struct {
	name   string
	values []string
}

func filters(p params) []filter {
	var out []filter
	for _, f := range p.items("Filter") {
		out = append(out, filter{name: f.get("Name"), values: f.strings("Value")})
	}
	return out
}

// matches applies fs to a resource whose field values field gives
// (nil: a filter this resource does not know, which matches nothing) and
// whose tags are tags.
func matches(fs []filter, tags map[string]string, field func(name string) []string) bool {
	for _, f := range fs {
		var have []string
		switch {
		case strings.HasPrefix(f.name, "tag:"):
			if v, ok := tags[strings.TrimPrefix(f.name, "tag:")]; ok {
				have = []string{v}
			}
		case f.name == "tag-key":
			have = sortedKeys(tags)
		default:
			have = field(f.name)
		}
		if !slices.ContainsFunc(f.values, func(v string) bool { return slices.Contains(have, v) }) {
			return false
		}
	}
	return true
}

type xmlEC2Tag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

func (e *Emulator) ec2Tags(id string) []xmlEC2Tag {
	var out []xmlEC2Tag
	for _, t := range e.tagsOf(id) {
		out = append(out, xmlEC2Tag{t.k, t.v})
	}
	return out
}

// instanceStateCodes are EC2's InstanceState codes.
var instanceStateCodes = map[string]int{"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}

type xmlGroup struct {
	GroupID   string `xml:"groupId"`
	GroupName string `xml:"groupName"`
}

type xmlInstance struct {
	InstanceID     string      `xml:"instanceId"`
	ImageID        string      `xml:"imageId"`
	StateCode      int         `xml:"instanceState>code"`
	StateName      string      `xml:"instanceState>name"`
	PrivateDNSName string      `xml:"privateDnsName"`
	InstanceType   string      `xml:"instanceType"`
	AZ             string      `xml:"placement>availabilityZone"`
	SubnetID       string      `xml:"subnetId"`
	VpcID          string      `xml:"vpcId"`
	PrivateIP      string      `xml:"privateIpAddress"`
	Groups         []xmlGroup  `xml:"groupSet>item"`
	Tags           []xmlEC2Tag `xml:"tagSet>item"`
}

type xmlReservation struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Instances     []xmlInstance `xml:"instancesSet>item"`
}

func (e *Emulator) instanceDoc(in *Instance) xmlInstance {
	d := xmlInstance{InstanceID: in.ID, ImageID: "ami-00000000000000000", StateCode: instanceStateCodes[in.State], StateName: in.State,
		PrivateDNSName: in.PrivateDNSName, InstanceType: in.InstanceType, AZ: in.AZ, SubnetID: in.SubnetID, VpcID: in.VPCID,
		PrivateIP: in.PrivateIP, Tags: e.ec2Tags(in.ID)}
	for _, g := range in.SecurityGroups {
		name := ""
		if sg, ok := e.sgs[g]; ok {
			name = sg.Name
		}
		d.Groups = append(d.Groups, xmlGroup{g, name})
	}
	return d
}

// describeInstances: by InstanceId.N (an unknown one is
// InvalidInstanceID.NotFound) or all, filtered, paged by MaxResults and
// NextToken (the CCM pages with MaxResults 1000, aws_ec2.go:63-68).
func (e *Emulator) describeInstances(p params) (any, error) {
	ids := p.strings("InstanceId")
	for _, id := range ids {
		if _, ok := e.instances[id]; !ok {
			return nil, errorf(http.StatusBadRequest, "InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", id)
		}
	}
	if len(ids) == 0 {
		ids = sortedKeys(e.instances)
	}
	fs := filters(p)
	var all []*Instance
	for _, id := range ids {
		in := e.instances[id]
		ok := matches(fs, e.tags[id], func(name string) []string {
			switch name {
			case "instance-id":
				return []string{in.ID}
			case "private-dns-name":
				return []string{in.PrivateDNSName}
			case "instance-state-name":
				return []string{in.State}
			case "vpc-id":
				return []string{in.VPCID}
			case "subnet-id":
				return []string{in.SubnetID}
			case "availability-zone":
				return []string{in.AZ}
			case "private-ip-address":
				return []string{in.PrivateIP}
			}
			return nil
		})
		if ok {
			all = append(all, in)
		}
	}
	start, _ := strconv.Atoi(p.get("NextToken"))
	start = min(max(start, 0), len(all))
	end := len(all)
	if n, ok := p.int32("MaxResults"); ok && n > 0 && start+int(n) < end {
		end = start + int(n)
	}
	out := struct {
		Reservations []xmlReservation `xml:"reservationSet>item"`
		NextToken    string           `xml:"nextToken,omitempty"`
	}{}
	for _, in := range all[start:end] {
		out.Reservations = append(out.Reservations, xmlReservation{ReservationID: "r-" + strings.TrimPrefix(in.ID, "i-"),
			OwnerID: AccountID, Instances: []xmlInstance{e.instanceDoc(in)}})
	}
	if end < len(all) {
		out.NextToken = strconv.Itoa(end)
	}
	return out, nil
}

type xmlSubnet struct {
	SubnetID  string      `xml:"subnetId"`
	VpcID     string      `xml:"vpcId"`
	AZ        string      `xml:"availabilityZone"`
	AZID      string      `xml:"availabilityZoneId"`
	CIDR      string      `xml:"cidrBlock"`
	State     string      `xml:"state"`
	OwnerID   string      `xml:"ownerId"`
	SubnetArn string      `xml:"subnetArn"`
	Tags      []xmlEC2Tag `xml:"tagSet>item"`
}

func (e *Emulator) describeSubnets(p params) (any, error) {
	ids := p.strings("SubnetId")
	for _, id := range ids {
		if _, ok := e.subnets[id]; !ok {
			return nil, errorf(http.StatusBadRequest, "InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", id)
		}
	}
	if len(ids) == 0 {
		ids = sortedKeys(e.subnets)
	}
	fs := filters(p)
	var out []xmlSubnet
	for _, id := range ids {
		s := e.subnets[id]
		if !matches(fs, e.tags[id], func(name string) []string {
			switch name {
			case "subnet-id":
				return []string{s.ID}
			case "vpc-id":
				return []string{s.VPCID}
			case "availability-zone":
				return []string{s.AZ}
			}
			return nil
		}) {
			continue
		}
		out = append(out, xmlSubnet{SubnetID: s.ID, VpcID: s.VPCID, AZ: s.AZ, AZID: e.zoneID(s.AZ), CIDR: s.CIDR, State: "available",
			OwnerID: AccountID, SubnetArn: fmt.Sprintf("arn:aws:ec2:%s:%s:subnet/%s", e.opts.Region, AccountID, s.ID), Tags: e.ec2Tags(id)})
	}
	return struct {
		Subnets []xmlSubnet `xml:"subnetSet>item"`
	}{out}, nil
}

type xmlAssociation struct {
	ID           string `xml:"routeTableAssociationId"`
	RouteTableID string `xml:"routeTableId"`
	SubnetID     string `xml:"subnetId,omitempty"`
	Main         bool   `xml:"main"`
	State        string `xml:"associationState>state"`
}

type xmlRoute struct {
	Destination string `xml:"destinationCidrBlock"`
	GatewayID   string `xml:"gatewayId"`
	State       string `xml:"state"`
	Origin      string `xml:"origin"`
}

type xmlRouteTable struct {
	RouteTableID string           `xml:"routeTableId"`
	VpcID        string           `xml:"vpcId"`
	OwnerID      string           `xml:"ownerId"`
	Associations []xmlAssociation `xml:"associationSet>item"`
	Routes       []xmlRoute       `xml:"routeSet>item"`
	Tags         []xmlEC2Tag      `xml:"tagSet>item"`
}

func (e *Emulator) describeRouteTables(p params) (any, error) {
	ids := p.strings("RouteTableId")
	if len(ids) == 0 {
		ids = sortedKeys(e.routes)
	}
	fs := filters(p)
	var out []xmlRouteTable
	for _, id := range ids {
		rt, ok := e.routes[id]
		if !ok {
			return nil, errorf(http.StatusBadRequest, "InvalidRouteTableID.NotFound", "The routeTable ID '%s' does not exist", id)
		}
		if !matches(fs, e.tags[id], func(name string) []string {
			switch name {
			case "route-table-id":
				return []string{rt.ID}
			case "vpc-id":
				return []string{rt.VPCID}
			case "association.subnet-id":
				return rt.Subnets
			case "association.main":
				return []string{strconv.FormatBool(rt.Main)}
			}
			return nil
		}) {
			continue
		}
		d := xmlRouteTable{RouteTableID: rt.ID, VpcID: rt.VPCID, OwnerID: AccountID, Tags: e.ec2Tags(id)}
		if rt.Main {
			d.Associations = append(d.Associations, xmlAssociation{ID: "rtbassoc-main-" + rt.ID, RouteTableID: rt.ID, Main: true, State: "associated"})
		}
		for _, s := range rt.Subnets {
			d.Associations = append(d.Associations, xmlAssociation{ID: "rtbassoc-" + s, RouteTableID: rt.ID, SubnetID: s, State: "associated"})
		}
		for _, r := range rt.Routes {
			d.Routes = append(d.Routes, xmlRoute{Destination: r.DestinationCIDR, GatewayID: r.GatewayID, State: "active", Origin: "CreateRoute"})
		}
		out = append(out, d)
	}
	return struct {
		RouteTables []xmlRouteTable `xml:"routeTableSet>item"`
	}{out}, nil
}

// zones are the availability zones of the seeded subnets and instances.
func (e *Emulator) zones() []string {
	var out []string
	for _, s := range e.subnets {
		if !slices.Contains(out, s.AZ) {
			out = append(out, s.AZ)
		}
	}
	for _, in := range e.instances {
		if !slices.Contains(out, in.AZ) {
			out = append(out, in.AZ)
		}
	}
	slices.Sort(out)
	return out
}

// zoneID is an AZ's ID as AWS spells them (use1-az1 for us-east-1a …).
func (e *Emulator) zoneID(az string) string {
	if az == "" {
		return ""
	}
	parts := strings.Split(e.opts.Region, "-")
	short := ""
	for _, p := range parts[:len(parts)-1] {
		short += p[:1]
	}
	return fmt.Sprintf("%s%s%s-az%d", parts[0][:min(len(parts[0]), 2)], short[1:], parts[len(parts)-1], int(az[len(az)-1]-'a')+1)
}

func (e *Emulator) describeAvailabilityZones(p params) (any, error) {
	type xmlZone struct {
		ZoneName   string `xml:"zoneName"`
		ZoneID     string `xml:"zoneId"`
		ZoneType   string `xml:"zoneType"`
		State      string `xml:"zoneState"`
		RegionName string `xml:"regionName"`
	}
	var out []xmlZone
	names := p.strings("ZoneName")
	for _, z := range e.zones() {
		if len(names) > 0 && !slices.Contains(names, z) {
			continue
		}
		out = append(out, xmlZone{ZoneName: z, ZoneID: e.zoneID(z), ZoneType: "availability-zone", State: "available", RegionName: e.opts.Region})
	}
	return struct {
		Zones []xmlZone `xml:"availabilityZoneInfo>item"`
	}{out}, nil
}

func (e *Emulator) createTags(p params) (any, error) {
	tags := map[string]string{}
	for _, t := range p.items("Tag") {
		tags[t.get("Key")] = t.get("Value")
	}
	for _, id := range p.strings("ResourceId") {
		e.setTags(id, tags)
	}
	return struct {
		Return bool `xml:"return"`
	}{true}, nil
}

// deleteTags removes Tag.N.Key, only where Tag.N.Value (when given)
// matches, as EC2 does.
func (e *Emulator) deleteTags(p params) (any, error) {
	for _, id := range p.strings("ResourceId") {
		for _, t := range p.items("Tag") {
			if v, ok := e.tags[id][t.get("Key")]; ok && (!t.has("Value") || t.get("Value") == v) {
				delete(e.tags[id], t.get("Key"))
			}
		}
	}
	return struct {
		Return bool `xml:"return"`
	}{true}, nil
}
