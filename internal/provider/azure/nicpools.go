package azure

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"zerodrop.dev/zerodrop/internal/model"
)

// NIC-based pools, for gate-only Services. cloud-provider-azure's default
// pool type (loadBalancerBackendPoolConfigurationType nodeIPConfiguration,
// with vmType vmss or standard) keeps membership on the nodes' network
// interfaces: the pool lists no addresses, only the IDs of the ipconfigs
// that name it (backendIPConfigurations, read-only, derived by ARM from the
// NICs and scale-set VMs). The gates match a pool against the pod's node
// address (lbtarget: the Node's InternalIP, which the CCM's node controller
// takes from the VM's primary NIC), so each ipconfig ID is read back to its
// private address, from two lists:
//
//   - …/resourceGroups/{rg}/providers/Microsoft.Network/networkInterfaces:
//     every standalone NIC of the resource group (VMs alone or in an
//     availability set), one GET for all of them
//     (https://learn.microsoft.com/rest/api/virtualnetwork/network-interfaces/list);
//   - …/virtualMachineScaleSets/{vmss}/virtualMachines/{i}/networkInterfaces:
//     the NICs of one scale-set VM, which ARM does not list with the
//     resource group's (api-version 2018-10-01,
//     https://learn.microsoft.com/rest/api/virtualnetwork/network-interface-in-vm-ss/list-virtual-machine-scale-set-vm-network-interfaces).
//
// The ipconfig ID says which list holds it (its resource group, scale set
// and instance). A Node is not looked up by its providerID: the address is
// what the gates compare, and the ipconfig's address is the node's.
//
// What is cached, and why: an ipconfig's address lives as long as its NIC
// (a scale-set VM keeps its address until it is deleted, and a new VM is a
// new instance ID), so a list is read again only when a pool names an
// ipconfig it did not have (a node that joined: a miss), at most once per
// ipconfigMissAge per list, or when a pool still names an ipconfig of it
// and it is older than ipconfigMaxAge (an address changed in place, a NIC
// deleted and made again under its name). A list no pool names any more is
// dropped at that age. So the reads follow the nodes joining, not the gates'
// polling: one GET per new scale-set VM, one per resource group's NICs,
// each at most every ipconfigMissAge, and the in-use lists every
// ipconfigMaxAge — well inside --azure-read-qps's budget. A pool naming an
// ipconfig no list has after a fresh read is an error (the gates wait and
// ask again), never an answer without that member: a termination gate must
// not take an unknown member for a node out of the pool.
//
// The identity then needs Microsoft.Network/networkInterfaces/read and
// Microsoft.Compute/virtualMachineScaleSets/virtualMachines/networkInterfaces/read
// (docs/azure.md, "Gate-only Services").

const (
	// ipconfigMissAge is how soon a list may be read again for an ipconfig
	// it did not have.
	ipconfigMissAge = 10 * time.Second
	// ipconfigMaxAge is how long a list in use is believed.
	ipconfigMaxAge = 10 * time.Minute
)

// ipconfigList is one list read: its ipconfigs' addresses by lower-case ID.
type ipconfigList struct {
	at   time.Time
	addr map[string]string
}

// ipconfigCache resolves ipconfig IDs to addresses. readMu is held across
// a resolution's reads, so that concurrent gates that miss the same node
// cause one read, not one each; mu only while lists is looked at, so that
// rule health's lookups (cachedIPConfig) never wait for a read. A list is
// replaced whole, never changed.
type ipconfigCache struct {
	readMu sync.Mutex
	mu     sync.Mutex
	lists  map[string]*ipconfigList // by ipconfigSource.key
	// missAge and maxAge are ipconfigMissAge and ipconfigMaxAge (tests
	// shorten them).
	missAge, maxAge time.Duration
}

func newIPConfigCache() ipconfigCache {
	return ipconfigCache{lists: map[string]*ipconfigList{}, missAge: ipconfigMissAge, maxAge: ipconfigMaxAge}
}

// ipconfigSource is the list an ipconfig ID is in: its key, and what to read.
type ipconfigSource struct {
	key                string
	rg, vmss, instance string // vmss empty: the resource group's NICs
}

// sourceOf parses an ipconfig ID of either form (ARM's casing of the path
// segments is not relied on: cloud-provider-azure compares the NIC form
// case-insensitively).
func sourceOf(id string) (ipconfigSource, bool) {
	parts := strings.Split(strings.Trim(id, "/"), "/")
	lower := func(i int) string { return strings.ToLower(parts[i]) }
	// subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Network/networkInterfaces/{nic}/ipConfigurations/{ipc}
	if len(parts) == 10 && lower(0) == "subscriptions" && lower(2) == "resourcegroups" && lower(4) == "providers" &&
		lower(5) == "microsoft.network" && lower(6) == "networkinterfaces" && lower(8) == "ipconfigurations" {
		return ipconfigSource{key: "nics/" + lower(3), rg: parts[3]}, true
	}
	// subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets/{vmss}/virtualMachines/{i}/networkInterfaces/{nic}/ipConfigurations/{ipc}
	if len(parts) == 14 && lower(0) == "subscriptions" && lower(2) == "resourcegroups" && lower(4) == "providers" &&
		lower(5) == "microsoft.compute" && lower(6) == "virtualmachinescalesets" && lower(8) == "virtualmachines" &&
		lower(10) == "networkinterfaces" && lower(12) == "ipconfigurations" {
		return ipconfigSource{key: "vmss/" + lower(3) + "/" + lower(7) + "/" + lower(9), rg: parts[3], vmss: parts[7],
			instance: parts[9]}, true
	}
	return ipconfigSource{}, false
}

// poolIPConfigs lists the ipconfig IDs a pool names: its
// backendIPConfigurations, and any address entry that references an
// ipconfig without an address of its own.
func poolIPConfigs(pool *armnetwork.BackendAddressPool) []string {
	if pool == nil || pool.Properties == nil {
		return nil
	}
	var out []string
	for _, c := range pool.Properties.BackendIPConfigurations {
		if c != nil && c.ID != nil {
			out = append(out, *c.ID)
		}
	}
	for _, a := range pool.Properties.LoadBalancerBackendAddresses {
		if a != nil && a.Properties != nil && a.Properties.IPAddress == nil && a.Properties.NetworkInterfaceIPConfiguration != nil &&
			a.Properties.NetworkInterfaceIPConfiguration.ID != nil {
			out = append(out, *a.Properties.NetworkInterfaceIPConfiguration.ID)
		}
	}
	return out
}

// resolveIPConfigs returns the address of each ipconfig ID (lower-case ID
// → canonical address), reading the lists that miss one or are too old.
func (p *Provider) resolveIPConfigs(ctx context.Context, ids []string) (map[string]string, error) {
	c := &p.ipconfigs
	c.readMu.Lock()
	defer c.readMu.Unlock()
	now := time.Now()
	sources := map[string]ipconfigSource{}
	lists := map[string]*ipconfigList{}
	c.mu.Lock()
	for _, id := range ids {
		src, ok := sourceOf(id)
		if !ok {
			c.mu.Unlock()
			return nil, fmt.Errorf("backend ipconfig %s: not a network interface's or scale-set VM's", id)
		}
		if sub := strings.Split(strings.Trim(id, "/"), "/")[1]; !strings.EqualFold(sub, p.opts.SubscriptionID) {
			c.mu.Unlock()
			return nil, fmt.Errorf("backend ipconfig %s: in subscription %s, not the provider's", id, sub)
		}
		sources[src.key] = src
		l := c.lists[src.key]
		switch {
		case l == nil || now.Sub(l.at) >= c.maxAge:
		case l.addr[strings.ToLower(id)] == "" && now.Sub(l.at) >= c.missAge:
		default:
			if _, stale := lists[src.key]; !stale {
				lists[src.key] = l
			}
			continue
		}
		lists[src.key] = nil // to read
	}
	for k, l := range c.lists {
		if _, used := sources[k]; !used && now.Sub(l.at) >= c.maxAge {
			delete(c.lists, k) // no pool names it any more
		}
	}
	c.mu.Unlock()
	for k, l := range lists {
		if l != nil {
			continue
		}
		addr, err := p.readIPConfigs(ctx, sources[k])
		if err != nil {
			return nil, err
		}
		lists[k] = &ipconfigList{at: now, addr: addr}
		c.mu.Lock()
		c.lists[k] = lists[k]
		c.mu.Unlock()
	}
	out := make(map[string]string, len(ids))
	for _, id := range ids {
		src, _ := sourceOf(id)
		l := lists[src.key]
		a := l.addr[strings.ToLower(id)]
		if a == "" {
			return nil, fmt.Errorf("backend ipconfig %s: no network interface has it (read %s ago)", id,
				now.Sub(l.at).Round(time.Second))
		}
		out[strings.ToLower(id)] = a
	}
	return out, nil
}

// cachedIPConfig is the address of an ipconfig as last read, without
// reading; "" when not known.
func (p *Provider) cachedIPConfig(id string) string {
	src, ok := sourceOf(id)
	if !ok {
		return ""
	}
	c := &p.ipconfigs
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.lists[src.key]; l != nil {
		return l.addr[strings.ToLower(id)]
	}
	return ""
}

// readIPConfigs reads one list: every page of a resource group's NICs, or
// of one scale-set VM's.
func (p *Provider) readIPConfigs(ctx context.Context, src ipconfigSource) (map[string]string, error) {
	addr := map[string]string{}
	add := func(nics []*armnetwork.Interface) {
		for _, n := range nics {
			if n == nil || n.Properties == nil {
				continue
			}
			for _, ipc := range n.Properties.IPConfigurations {
				if ipc != nil && ipc.ID != nil && ipc.Properties != nil && ipc.Properties.PrivateIPAddress != nil {
					addr[strings.ToLower(*ipc.ID)] = model.CanonicalIP(*ipc.Properties.PrivateIPAddress)
				}
			}
		}
	}
	if src.vmss == "" {
		pager := p.nics.NewListPager(src.rg, nil)
		for pager.More() {
			p.opts.Hooks.OnRead("list-nics")
			page, err := pager.NextPage(ctx)
			if err != nil {
				return nil, p.classify("list network interfaces of resource group "+src.rg, err)
			}
			add(page.Value)
		}
		return addr, nil
	}
	pager := p.nics.NewListVirtualMachineScaleSetVMNetworkInterfacesPager(src.rg, src.vmss, src.instance, nil)
	for pager.More() {
		p.opts.Hooks.OnRead("list-vmss-vm-nics")
		page, err := pager.NextPage(ctx)
		if isNotFound(err) {
			return addr, nil // the VM is gone: none of its ipconfigs resolves
		}
		if err != nil {
			return nil, p.classify("list network interfaces of scale-set VM "+src.vmss+"/"+src.instance, err)
		}
		add(page.Value)
	}
	return addr, nil
}
